//! Calls between the file's device functions, by name: which helpers need the task context
//! (they read blockIdx/gridDim, maybe through other helpers) and which synchronize the block.
//! Calls are matched by name because calls are rewritten by name: every overload of a name that
//! needs the context gets it.

use super::body::{BodyFacts, Call};
use super::sites::FunctionSite;
use super::HelperPlan;
use std::collections::{BTreeMap, BTreeSet};
use tree_sitter::Node;

pub struct CallGraph {
    /// Helpers by name: indices into the analysis' helper list.
    pub by_name: BTreeMap<String, Vec<usize>>,
    /// Names of helpers that take the task context.
    pub ctx_names: BTreeSet<String>,
    /// Names of helpers that synchronize the block, directly or through other helpers.
    pub barrier_names: BTreeSet<String>,
    /// Names of helpers that synchronize a warp's lanes by a fixed mask (`BodyFacts::
    /// warp_syncs`), directly or through other helpers: `warpReduceSum` and the like.
    pub warp_sync_names: BTreeSet<String>,
    /// Names of member functions that read blockIdx/gridDim, maybe through others (`operator()`
    /// for a functor's): called through an object, they cannot be given the task context.
    pub member_ctx: BTreeSet<String>,
    /// Names of the file's member functions (a call `x.f()` of another name may be a call of a
    /// functor held in a field `f`).
    pub member_names: BTreeSet<String>,
    /// Names of helpers that take the task context and whose address the file takes (the name
    /// stands other than as a callee: `Index f = gid;`, `{gid}`, `&gid`): a call through a
    /// function pointer may reach them and cannot pass the context (`address_taken`).
    pub address_taken: BTreeSet<String>,
    /// Names of the variables declared at namespace scope (`__device__ int (*pick)() = f;`):
    /// a call of one by name is a call through a function pointer (`file_variables`).
    pub file_variables: BTreeSet<String>,
    /// Classes whose objects read blockIdx/gridDim in code that runs without a call by name
    /// (`implicit_block_readers`).
    pub implicit_readers: BTreeSet<String>,
    /// Names whose use reads blockIdx/gridDim: the file's macros (and its includes') that read
    /// them, maybe through others, and the helpers that do (`ctx_names`).
    pub block_names: BTreeSet<String>,
}

impl CallGraph {
    /// Builds the graph and marks the helpers that need the task context. `external_barriers`:
    /// functions of included files that synchronize the block (`Options::known_helpers`); a
    /// call to one is a barrier like a call to a helper of this file that synchronizes.
    /// `external_warp_syncs`: those that synchronize the lanes of a warp by a fixed mask.
    /// `external_ctx`: functions of included files that take the task context
    /// (`KnownHelper::with_ctx`); a helper here that calls one needs the context too.
    pub fn build(
        helpers: &mut [HelperPlan],
        external_barriers: &[&str],
        external_warp_syncs: &[&str],
        external_ctx: &[&str],
    ) -> CallGraph {
        let mut ctx_names: BTreeSet<String> = external_ctx
            .iter()
            .filter(|n| !helpers.iter().any(|h| h.site.name == **n))
            .map(|n| n.to_string())
            .collect();
        loop {
            let mut changed = false;
            for h in helpers.iter_mut() {
                if h.needs_ctx {
                    continue;
                }
                // A default argument that reads the block index needs the context too: the
                // calls of its context form pass that argument (`block_defaults`).
                let reading_default = h
                    .declarations()
                    .any(|d| super::decide::default_reads_block_ids(d, &BTreeSet::new()));
                let needs = !h.facts.virtual_reads.is_empty()
                    || reading_default
                    || h.facts.calls.iter().any(|c| ctx_names.contains(&c.name))
                    || h.facts
                        .member_calls
                        .iter()
                        .any(|(m, _)| ctx_names.contains(m));
                if needs {
                    h.needs_ctx = true;
                    ctx_names.insert(h.site.name.clone());
                    changed = true;
                }
            }
            if !changed {
                break;
            }
        }
        for h in helpers.iter_mut() {
            if ctx_names.contains(&h.site.name) {
                h.needs_ctx = true;
            }
        }
        // The other files' names that no helper here shadows.
        let external = |names: &[&str], helpers: &[HelperPlan]| -> BTreeSet<String> {
            names
                .iter()
                .filter(|n| !helpers.iter().any(|h| h.site.name == **n))
                .map(|n| n.to_string())
                .collect()
        };
        let barrier_names = calling_closure(helpers, external(external_barriers, helpers), |f| {
            !f.barriers.is_empty()
        });
        for h in helpers.iter_mut() {
            h.synchronizes = barrier_names.contains(&h.site.name);
        }
        let warp_sync_names =
            calling_closure(helpers, external(external_warp_syncs, helpers), |f| {
                !f.warp_syncs.is_empty()
            });
        for h in helpers.iter_mut() {
            h.synchronizes_warp = warp_sync_names.contains(&h.site.name);
        }
        let mut by_name: BTreeMap<String, Vec<usize>> = BTreeMap::new();
        for (i, h) in helpers.iter().enumerate() {
            by_name.entry(h.site.name.clone()).or_default().push(i);
        }
        let member_ctx = helpers
            .iter()
            .filter(|h| h.site.member && h.needs_ctx)
            .map(|h| h.site.name.clone())
            .collect();
        let member_names = helpers
            .iter()
            .filter(|h| h.site.member)
            .map(|h| h.site.name.clone())
            .collect();
        CallGraph {
            by_name,
            ctx_names,
            barrier_names,
            warp_sync_names,
            member_ctx,
            member_names,
            address_taken: BTreeSet::new(),
            file_variables: BTreeSet::new(),
            implicit_readers: BTreeSet::new(),
            block_names: BTreeSet::new(),
        }
    }

    /// The helpers a call by this name may reach.
    pub fn callees(&self, name: &str) -> impl Iterator<Item = usize> + '_ {
        self.by_name.get(name).into_iter().flatten().copied()
    }

    /// Whether the task context, passed to helper `start`, reaches every read of the block index
    /// on its paths: every helper it calls by name that needs the context can take it, and no
    /// body on the way calls a member that needs it through an object or holds another path
    /// that refuses a kernel (`blocks_context`).
    pub fn context_reaches_every_read(
        &self,
        start: usize,
        helpers: &[HelperPlan],
        src: &str,
    ) -> bool {
        !self.reach_any(start, helpers, |h| {
            (h.needs_ctx && !h.site.can_take_ctx()) || self.blocks_context(h, src)
        })
    }

    /// Whether a helper that `start` reaches (itself included) reads the block index on a path
    /// that no task context can follow (`blocks_context`): a kernel of another file that calls
    /// `start` would read the persistent block's values there (`KnownHelper::reads_block_ids`).
    pub fn reaches_unfollowed_read(&self, start: usize, helpers: &[HelperPlan], src: &str) -> bool {
        // Calls in this file pass the defaults that read the block index (`block_defaults`);
        // another file's calls of `start` itself do not.
        helpers[start]
            .declarations()
            .any(|d| super::decide::default_reads_block_ids(d, &self.block_names))
            || self.reach_any(start, helpers, |h| self.blocks_context(h, src))
    }

    /// The paths of one helper's body that refuse a kernel of this file reaching it (`decide`):
    /// a member call needing the context through an object, a default argument that reads the
    /// block index where the calls cannot pass it (`block_defaults`), and
    /// `decide::body_blockers` (function pointers, implicit type code, local classes).
    fn blocks_context(&self, h: &HelperPlan, src: &str) -> bool {
        let f = &h.facts;
        f.member_calls
            .iter()
            .any(|(m, _)| self.member_ctx.contains(m))
            || (h.call_defaults.is_none()
                && h.declarations()
                    .any(|d| super::decide::default_reads_block_ids(d, &self.block_names)))
            || !super::decide::body_blockers(f, &h.site, self, src).is_empty()
    }

    /// A helper's default arguments by position where those that read blockIdx/gridDim can
    /// be passed at its calls (`decide::passable_block_defaults`), and it is the only helper of
    /// its name (the calls name it by name alone). `analyze` keeps it in
    /// `HelperPlan::call_defaults` once `block_names` is known.
    pub fn block_defaults(&self, h: &HelperPlan) -> Option<Vec<Option<String>>> {
        if self.callees(&h.site.name).count() != 1 {
            return None;
        }
        let declared: Vec<&super::FunctionSite> = h.declarations().collect();
        super::decide::passable_block_defaults(&declared, &self.block_names)
    }

    /// Whether `found` holds for a helper that `start` reaches by calls by name (itself
    /// included).
    fn reach_any(
        &self,
        start: usize,
        helpers: &[HelperPlan],
        found: impl Fn(&HelperPlan) -> bool,
    ) -> bool {
        let mut seen = BTreeSet::from([start]);
        let mut todo = vec![start];
        while let Some(i) = todo.pop() {
            if found(&helpers[i]) {
                return true;
            }
            for c in &helpers[i].facts.calls {
                for j in self.callees(&c.name) {
                    if seen.insert(j) {
                        todo.push(j);
                    }
                }
            }
        }
        false
    }

    /// The file's helpers that a body with these facts calls, directly or through others.
    pub fn reachable(&self, facts: &BodyFacts, helpers: &[HelperPlan]) -> BTreeSet<usize> {
        let mut seen = BTreeSet::new();
        let mut calls: Vec<&str> = facts.calls.iter().map(|c| c.name.as_str()).collect();
        while let Some(name) = calls.pop() {
            for i in self.callees(name) {
                if seen.insert(i) {
                    calls.extend(helpers[i].facts.calls.iter().map(|c| c.name.as_str()));
                }
            }
        }
        seen
    }

    /// Whether a call goes to a helper that synchronizes the block.
    pub fn synchronizes(&self, call: &Call) -> bool {
        self.barrier_names.contains(&call.name)
    }

    /// Whether a call goes to a helper that synchronizes a warp's lanes by a fixed mask.
    pub fn synchronizes_warp(&self, call: &Call) -> bool {
        self.warp_sync_names.contains(&call.name)
    }
}

/// `names` and the names of the helpers whose own body satisfies `direct` or that call one of
/// those, to a fixed point: the helpers that synchronize, directly or through others.
fn calling_closure(
    helpers: &[HelperPlan],
    mut names: BTreeSet<String>,
    direct: impl Fn(&BodyFacts) -> bool,
) -> BTreeSet<String> {
    loop {
        let before = names.len();
        for h in helpers {
            if direct(&h.facts) || h.facts.calls.iter().any(|c| names.contains(&c.name)) {
                names.insert(h.site.name.clone());
            }
        }
        if names.len() == before {
            return names;
        }
    }
}

/// Earlier declarations of the function `def` defines: same name and scope, before it, and not
/// another overload. A declaration with another number of parameters declares a different
/// function (HeCBench's qtclustering declares its kernel with one parameter more than it
/// defines), and the kernel's launch types placed there named that overload's address.
pub fn prior_declarations<'t>(
    decls: &[FunctionSite<'t>],
    def: &FunctionSite<'t>,
) -> Vec<FunctionSite<'t>> {
    decls
        .iter()
        .filter(|d| {
            d.name == def.name
                && d.scope == def.scope
                && d.outer.end_byte() <= def.outer.start_byte()
                && !other_overload(d, def)
        })
        .cloned()
        .collect()
}

/// Whether two functions of one name certainly differ in their parameters: different counts,
/// where neither list has a pack, a C `...` or parameters chosen by the preprocessor (whose
/// counts depend on the configuration). Default arguments do not change a count, nor does
/// `(void)`, which has no parameter.
fn other_overload(a: &FunctionSite, b: &FunctionSite) -> bool {
    let fixed = |s: &FunctionSite| {
        let mut c = s.params.walk();
        let c_variadic = s
            .params
            .children(&mut c)
            .any(|x| matches!(x.kind(), "..." | "variadic_parameter"));
        !c_variadic
            && s.params_after.is_empty()
            && s.param_list.iter().all(|p| !p.pack && p.before.is_empty())
    };
    fixed(a) && fixed(b) && a.param_list.len() != b.param_list.len()
}

/// The names of the variables that declarations at namespace scope (out of every function)
/// declare: everything a declaration names but functions (`int f();`, `int* f();`). A pointer
/// to a function (`int (*pick)() = which;`), a table of them, or an object of a type named by
/// a typedef is a variable.
pub fn file_variables(root: Node, src: &str) -> BTreeSet<String> {
    let k = crate::lang::kinds();
    let mut out = BTreeSet::new();
    crate::lang::visit(root, |n| {
        if n.kind_id() == k.function_definition || n.kind_id() == k.compound_statement {
            return false;
        }
        if n.kind_id() == k.declaration {
            for d in crate::lang::declarators(n) {
                if !declares_function(d) {
                    if let Some(name) = crate::lang::declarator_name(d) {
                        out.insert(crate::lang::text(name, src).to_string());
                    }
                }
            }
            return false;
        }
        true
    });
    out
}

/// Whether a declarator declares a function: a function declarator of a name, maybe under
/// pointers or references to its return type (`int* f()`); a parenthesized one (`(*f)()`)
/// declares a pointer, and one with an initializer a variable.
fn declares_function(declarator: Node) -> bool {
    let f = crate::lang::fields();
    let mut d = declarator;
    loop {
        match d.kind() {
            "function_declarator" => {
                return d.child_by_field_id(f.declarator).is_some_and(|inner| {
                    matches!(
                        inner.kind(),
                        "identifier"
                            | "qualified_identifier"
                            | "field_identifier"
                            | "operator_name"
                            | "destructor_name"
                            | "template_function"
                    )
                })
            }
            "pointer_declarator" | "reference_declarator" => {
                match d.child_by_field_id(f.declarator) {
                    Some(inner) => d = inner,
                    None => return false,
                }
            }
            _ => return false,
        }
    }
}

/// The names among `names` that stand in the tree under `root` other than as the function of a
/// call or the name in a function's declarator: their address is taken (a function pointer, a
/// table of them, an argument).
pub fn address_taken(root: Node, src: &str, names: &BTreeSet<String>) -> BTreeSet<String> {
    let k = crate::lang::kinds();
    let f = crate::lang::fields();
    let mut out = BTreeSet::new();
    if names.is_empty() {
        return out;
    }
    crate::lang::visit(root, |n| {
        let name = crate::lang::text(n, src);
        if n.kind_id() != k.identifier || !names.contains(name) || out.contains(name) {
            return true;
        }
        // Up through `ns::name` and `name<T>` to the expression that names it.
        let mut e = n;
        while let Some(p) = e.parent() {
            let named = (p.kind_id() == k.qualified_identifier
                || p.kind_id() == k.template_function)
                && p.child_by_field_id(f.name) == Some(e);
            if !named {
                break;
            }
            e = p;
        }
        let callee_or_declarator = e.parent().is_some_and(|p| {
            let at = |id| p.child_by_field_id(id) == Some(e);
            (p.kind_id() == k.call_expression && at(f.function))
                || (p.kind_id() == k.function_declarator && at(f.declarator))
        });
        // A variable or parameter of the helper's name (`int m_boundary =
        // V::m_boundary(in);`), and its uses after it in the same function, name the variable.
        if !callee_or_declarator && !names_a_variable(n, name, src) {
            out.insert(name.to_string());
        }
        true
    });
    out
}

/// Whether `n` (an identifier `name`) declares a variable or parameter, or is a use of one that
/// its function declares before it.
fn names_a_variable(n: Node, name: &str, src: &str) -> bool {
    if variable_declarator(n) {
        return true;
    }
    let mut fun = n.parent();
    while let Some(x) = fun {
        if x.kind() == "function_definition" {
            break;
        }
        fun = x.parent();
    }
    let Some(fun) = fun else {
        return false;
    };
    let mut found = false;
    crate::lang::visit(fun, |m| {
        if !found
            && m.start_byte() < n.start_byte()
            && m.kind_id() == crate::lang::kinds().identifier
            && crate::lang::text(m, src) == name
            && variable_declarator(m)
        {
            // Only where `n` lies in the declaration's scope: after that scope's end the
            // name is the helper's again.
            let mut scope = m.parent();
            while let Some(x) = scope {
                if matches!(
                    x.kind(),
                    "compound_statement"
                        | "for_statement"
                        | "for_range_loop"
                        | "lambda_expression"
                        | "function_definition"
                ) {
                    break;
                }
                scope = x.parent();
            }
            found = scope.is_some_and(|x| x.byte_range().contains(&n.start_byte()));
        }
        !found && m.start_byte() < n.start_byte()
    });
    found
}

/// Whether identifier `n` is the name a variable or parameter declaration declares (through
/// `*`, `&` and `[]` declarators).
fn variable_declarator(n: Node) -> bool {
    let f = crate::lang::fields();
    let mut e = n;
    while let Some(p) = e.parent() {
        let wraps = matches!(
            p.kind(),
            "pointer_declarator" | "reference_declarator" | "array_declarator"
        ) && p.child_by_field_id(f.declarator) == Some(e);
        if !wraps {
            break;
        }
        e = p;
    }
    e.parent().is_some_and(|p| {
        matches!(
            p.kind(),
            "init_declarator" | "declaration" | "parameter_declaration"
        ) && p.child_by_field_id(f.declarator) == Some(e)
    })
}

/// The first identifier under `n` that names `blockIdx`/`gridDim` (and `threadIdx`, with
/// `thread_idx`) or a name of `block_names`.
pub fn first_block_name<'t>(
    n: Node<'t>,
    src: &str,
    block_names: &BTreeSet<String>,
    thread_idx: bool,
) -> Option<Node<'t>> {
    let k = crate::lang::kinds();
    let mut found = None;
    crate::lang::visit(n, |m| {
        let text = crate::lang::text(m, src);
        if found.is_none()
            && m.kind_id() == k.identifier
            && (crate::lang::VIRTUAL_BUILTINS
                .iter()
                .any(|(name, _)| *name == text)
                || (thread_idx && text == "threadIdx")
                || block_names.contains(text))
        {
            found = Some(m);
        }
        found.is_none()
    });
    found
}

/// The type names (`type_identifier`) that the tree under `n` spells.
fn type_names(n: Node, src: &str) -> Vec<String> {
    let k = crate::lang::kinds();
    let mut out = Vec::new();
    crate::lang::visit(n, |m| {
        if m.kind_id() == k.type_identifier {
            out.push(crate::lang::text(m, src).to_string());
        }
        true
    });
    out
}

/// Names of the file's classes whose objects read blockIdx/gridDim without a call by name:
/// a default member initializer, a constructor (with its initializer list), a destructor or an
/// operator of the class reads one, or a base class is such a class; the types a free operator
/// that reads one takes; and aliases of them. A kernel that uses such a type runs that code
/// where no task context can reach it (`decide`). `block_names`: macros and helpers that read
/// the block index.
pub fn implicit_block_readers(
    root: Node,
    src: &str,
    block_names: &BTreeSet<String>,
) -> BTreeSet<String> {
    let k = crate::lang::kinds();
    let f = crate::lang::fields();
    let reads = |n: Node| first_block_name(n, src, block_names, false).is_some();
    // (type, the types it stands on: bases or an alias's definition, whether its own implicit
    // code reads the block index)
    let mut types: Vec<(String, Vec<String>, bool)> = Vec::new();
    crate::lang::visit(root, |n| {
        // Kinds by id: this walk sees every node of the file.
        let id = n.kind_id();
        if id == k.alias_declaration || id == k.type_definition {
            // `using C = Cursor;`, `typedef Cursor C;`: the alias stands for the class.
            let alias = if id == k.alias_declaration {
                n.child_by_field_id(f.name)
            } else {
                n.child_by_field_id(f.declarator)
            };
            if let (Some(alias), Some(ty)) = (alias, n.child_by_field_id(f.r#type)) {
                let alias = crate::lang::text(alias, src).to_string();
                types.push((alias, type_names(ty, src), false));
            }
        } else if id == k.function_definition {
            // A free operator that reads the block index (`a + b` calls it by no name): the
            // types it takes count as such classes.
            let declarator = n.child_by_field_id(f.declarator);
            let head = declarator.map_or("", |d| crate::lang::text(d, src));
            let in_class = n
                .parent()
                .is_some_and(|p| p.kind_id() == k.field_declaration_list);
            let params = declarator.and_then(|d| d.child_by_field_id(f.parameters));
            if let Some(params) = params
                .filter(|_| !in_class && head.trim_start().starts_with("operator") && reads(n))
            {
                types.extend(
                    type_names(params, src)
                        .into_iter()
                        .map(|t| (t, Vec::new(), true)),
                );
            }
        } else if id == k.class_specifier || id == k.struct_specifier {
            if let Some(class) = class_reads_implicitly(n, src, &reads) {
                types.push(class);
            }
        }
        true
    });
    let mut out: BTreeSet<String> = types.iter().filter(|t| t.2).map(|t| t.0.clone()).collect();
    loop {
        let before = out.len();
        for (name, under, _) in &types {
            if under.iter().any(|b| out.contains(b)) {
                out.insert(name.clone());
            }
        }
        if out.len() == before {
            return out;
        }
    }
}

/// A class with a body: its name, its bases, and whether code its objects run without a call
/// by name (default member initializers, constructors, destructor, operators) `reads`.
fn class_reads_implicitly(
    n: Node,
    src: &str,
    reads: &dyn Fn(Node) -> bool,
) -> Option<(String, Vec<String>, bool)> {
    let k = crate::lang::kinds();
    let f = crate::lang::fields();
    let (name, body) = (n.child_by_field_id(f.name)?, n.child_by_field_id(f.body)?);
    let name = crate::lang::text(name, src);
    let last = name.rsplit("::").next().unwrap_or(name).to_string();
    let mut cursor = n.walk();
    let bases = n
        .named_children(&mut cursor)
        .filter(|c| c.kind() == "base_class_clause")
        .flat_map(|c| type_names(c, src))
        .collect();
    let mut cursor = body.walk();
    let implicit = body.named_children(&mut cursor).any(|member| {
        let def = if member.kind_id() == k.template_declaration {
            let mut c = member.walk();
            let found = member
                .named_children(&mut c)
                .find(|x| x.kind_id() == k.function_definition);
            found.unwrap_or(member)
        } else {
            member
        };
        let runs_implicitly = if def.kind() == "field_declaration" {
            def.child_by_field_id(f.default_value).is_some()
        } else if def.kind_id() == k.function_definition {
            let declarator = def
                .child_by_field_id(f.declarator)
                .map_or("", |d| crate::lang::text(d, src));
            let head = declarator.split('(').next().unwrap_or("").trim();
            head == last || head.starts_with('~') || head.contains("operator")
        } else {
            false
        };
        runs_implicitly && reads(def)
    });
    Some((last, bases, implicit))
}

#[cfg(test)]
mod tests {
    use super::address_taken;
    use std::collections::BTreeSet;

    fn taken(src: &str) -> BTreeSet<String> {
        let parsed = crate::parse::parse(src);
        let names = BTreeSet::from(["row".to_string()]);
        address_taken(parsed.tree.root_node(), src, &names)
    }

    /// A variable or parameter named as the helper, and its uses in its scope, take no
    /// address; past the variable's block, or before it, the name is the helper's again.
    #[test]
    fn a_variable_of_a_helpers_name_takes_no_address() {
        let helper = "__device__ unsigned row() { return blockIdx.x; }\n";
        for src in [
            "__global__ void k(unsigned* o) { unsigned row = ::row(); o[row] = row; }\n",
            "__global__ void k(unsigned* o, unsigned row) { o[row] = row; }\n",
            "__global__ void k(unsigned* o) { for (unsigned row = 0; row < 4; ++row) o[row] = 1; }\n",
            "__global__ void k(unsigned* o) { auto f = [](unsigned row) { return row; }; o[0] = f(1); }\n",
        ] {
            assert!(taken(&format!("{helper}{src}")).is_empty(), "{src}");
        }
        for src in [
            "__global__ void k(unsigned* o) { { unsigned row = 1; o[0] = row; } auto p = row; o[1] = p(); }\n",
            "__global__ void k(unsigned* o) { auto p = row; unsigned row = 2; o[row] = p(); }\n",
            "__device__ unsigned (*p)() = row;\n",
        ] {
            assert!(taken(&format!("{helper}{src}")).contains("row"), "{src}");
        }
    }
}
