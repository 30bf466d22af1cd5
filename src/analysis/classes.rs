//! What a file says about its classes that tells which class a member call reaches: type
//! aliases (`typedef Foo<8> FooType;`, `using FooType = Foo<8>;`, at any scope) and the
//! classes' fields (`LocalRef<N> local;` in `struct Cost`, so that `local.Read()` in a member of
//! `Cost` calls `LocalRef::Read`). Names are matched without scopes: a name that two places
//! define differently is known as ambiguous, and no call through it is resolved.

use crate::lang::{self, class_name_of_type, kinds, text};
use std::collections::BTreeMap;
use tree_sitter::Node;

/// A name's meaning: the class, or None where the file gives it more than one.
type Meaning = Option<String>;

#[derive(Debug, Default, Clone)]
pub struct Classes {
    aliases: BTreeMap<String, Meaning>,
    /// Class name → field name → the field's class.
    fields: BTreeMap<String, BTreeMap<String, Meaning>>,
}

fn note(map: &mut BTreeMap<String, Meaning>, name: &str, class: Option<&str>) {
    let class = class.map(str::to_string);
    map.entry(name.to_string())
        .and_modify(|m| {
            if *m != class {
                *m = None;
            }
        })
        .or_insert(class);
}

impl Classes {
    pub fn new(root: Node, src: &str) -> Classes {
        let k = kinds();
        let f = lang::fields();
        let mut c = Classes::default();
        lang::visit(root, |n| {
            if n.kind_id() == k.type_definition {
                let class = n
                    .child_by_field_id(f.r#type)
                    .and_then(|t| class_name_of_type(t, src));
                for d in lang::declarators(n) {
                    if let Some(name) = lang::declarator_name(d) {
                        note(&mut c.aliases, text(name, src), class);
                    }
                }
            } else if n.kind_id() == k.alias_declaration {
                let class = n
                    .child_by_field_id(f.r#type)
                    .and_then(|t| t.child_by_field_id(f.r#type))
                    .and_then(|t| class_name_of_type(t, src));
                if let Some(name) = n.child_by_field_id(f.name) {
                    note(&mut c.aliases, text(name, src), class);
                }
            } else if n.kind_id() == k.class_specifier || n.kind_id() == k.struct_specifier {
                let name = n
                    .child_by_field_id(f.name)
                    .and_then(|x| class_name_of_type(x, src));
                let body = n.child_by_field_id(f.body);
                if let (Some(name), Some(body)) = (name, body) {
                    let fields = c.fields.entry(name.to_string()).or_default();
                    let mut cursor = body.walk();
                    for m in body
                        .named_children(&mut cursor)
                        .filter(|m| m.kind() == "field_declaration")
                    {
                        let class = m
                            .child_by_field_id(f.r#type)
                            .and_then(|t| class_name_of_type(t, src));
                        for d in lang::declarators(m) {
                            if let Some(field) = lang::declarator_name(d) {
                                note(fields, text(field, src), class);
                            }
                        }
                    }
                }
            }
            true
        });
        c
    }

    /// The class a type's name stands for: itself, or what its alias names (through aliases of
    /// aliases). None where an alias is ambiguous or names no class.
    pub fn resolve(&self, name: &str) -> Option<String> {
        let mut name = name.to_string();
        for _ in 0..8 {
            match self.aliases.get(&name) {
                None => return Some(name),
                Some(None) => return None,
                Some(Some(next)) if *next == name => return Some(name),
                Some(Some(next)) => name = next.clone(),
            }
        }
        None
    }

    /// The class of field `field` of class `class`, where the class declares it with one.
    pub fn field_class(&self, class: &str, field: &str) -> Option<String> {
        let class = self.resolve(class)?;
        let of = self.fields.get(&class)?.get(field)?.as_deref()?;
        self.resolve(of)
    }
}

#[cfg(test)]
mod tests {
    use super::Classes;

    #[test]
    fn aliases_and_fields_name_classes_and_conflicts_name_none() {
        let src = "template <int N> struct Local { int v; };\n\
                   template <int N> struct Cost {\n  typedef Local<N> LocalType;\n  LocalType local;\n  int plain;\n};\n\
                   using CostType = Cost<5>;\n\
                   typedef Cost<3> Twice;\n\
                   __global__ void k() { typedef Local<1> Twice; }\n";
        let parsed = crate::parse::parse(src);
        let c = Classes::new(parsed.tree.root_node(), src);
        assert_eq!(c.resolve("CostType").as_deref(), Some("Cost"));
        assert_eq!(c.resolve("LocalType").as_deref(), Some("Local"));
        assert_eq!(c.resolve("Local").as_deref(), Some("Local"));
        // Two typedefs of one name for different classes: nothing is certain.
        assert_eq!(c.resolve("Twice"), None);
        assert_eq!(c.field_class("Cost", "local").as_deref(), Some("Local"));
        assert_eq!(c.field_class("CostType", "local").as_deref(), Some("Local"));
        assert_eq!(c.field_class("Cost", "plain"), None);
        assert_eq!(c.field_class("Cost", "missing"), None);
    }
}
