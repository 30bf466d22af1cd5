//! What the scan finds: functions with CUDA execution-space qualifiers (their header's pieces,
//! as tree nodes and text) and kernel launch sites.

use super::pragmas::Pragmas;
use crate::diagnostics::{Code, Diagnostic};
use tree_sitter::Node;

#[derive(Debug, Clone, Copy)]
pub struct Linkage<'t> {
    pub node: Node<'t>,
    /// `extern "C" { ... }` rather than `extern "C" <one declaration>`.
    pub braced: bool,
}

#[derive(Debug, Clone)]
pub struct Param {
    /// The parameter's source text.
    pub text: String,
    /// The name, or a generated one for an unnamed parameter (then `text` does not contain it).
    pub name: String,
    pub named: bool,
    /// `Ts... args`: forwarded as `args...`.
    pub pack: bool,
    /// Preprocessor lines between the previous parameter (or the `(`) and this one, such as
    /// `#ifndef FIXED_WIDTH` (the masked view of the grammar blanks them, `parse::masked`);
    /// empty when there are none. Generated lists repeat them, so each configuration gets its
    /// own parameters.
    pub before: String,
    /// A `__grid_constant__` parameter: where the shared body's header drops the qualifier
    /// and takes the parameter by reference instead (`GridConstant`).
    pub grid_constant: Option<GridConstant>,
    /// A parameter passed by value whose type is named (a class, a template parameter, an
    /// alias), with no qualifier but `const` and a plain name as declarator (`ValueType`).
    pub value_type: Option<ValueType>,
}

/// A kernel parameter of a named type passed by value (`Param::value_type`). The shared body
/// takes it as `body_param_t<T>` (task_loop.cuh: by reference where `T` is not trivially
/// destructible), or as `body_const_param_t<T>` where it is `const` (by reference always: a
/// class's copy constructor may take `T&`, which a `const` object cannot bind, as faiss's
/// `Tensor` does); the wrapper passes a fresh copy per task where one is not trivially
/// destructible.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ValueType {
    /// The byte range of the type's name.
    pub range: std::ops::Range<usize>,
    /// The type's text.
    pub text: String,
    /// Where the parameter is `const`: the qualifier's byte range (the body's alias says it
    /// instead, and a `const` beside a reference type is a warning).
    pub constant: Option<std::ops::Range<usize>>,
}

/// How many of `list`'s parameters every configuration has: those outside every preprocessor
/// group (`Param::before`). With groups that choose among alternatives (`#if` `int* q,` `#else`
/// `char* q,` `#endif`) the list holds every branch's parameters, more than any configuration
/// has, so this is what a launch must at least pass.
pub fn unconditional_params(list: &[Param]) -> usize {
    let mut depth = 0usize;
    let mut count = 0;
    for p in list {
        for line in p.before.lines() {
            let word = line.trim_start_matches('#').trim_start();
            if word.starts_with("if") {
                depth += 1;
            } else if word.starts_with("endif") {
                depth = depth.saturating_sub(1);
            }
        }
        count += usize::from(depth == 0);
    }
    count
}

/// A kernel defined out of its namespace: `__global__ void a::b::k(...) { ... }`.
#[derive(Debug, Clone)]
pub struct Qualified {
    /// The qualified name, `a::b::k`.
    pub range: std::ops::Range<usize>,
    /// The namespaces that qualify it, outermost first (none for `::k`).
    pub namespaces: Vec<String>,
}

/// A kernel parameter marked `__grid_constant__` (read-only, kept in the kernel's parameter
/// space, its address may be taken: a TMA descriptor is passed so). The qualifier is only
/// allowed on `__global__` parameters, so the shared body (a `__device__` function) drops it
/// and takes the parameter as a `const` reference: the body then reads, and takes the address
/// of, the kernel's own parameter, as the original did, rather than a copy.
#[derive(Debug, Clone)]
pub struct GridConstant {
    /// The qualifier and the blanks after it.
    pub qualifier: std::ops::Range<usize>,
    /// Where `&` goes: the start of the parameter's name (none for an unnamed parameter,
    /// which the body never reads).
    pub name_start: Option<usize>,
    /// How the qualifier is spelled: `__grid_constant__`, or a macro that stands for it
    /// (`parse::grid_constant_macros`).
    pub spelling: String,
}

impl Param {
    /// The declaration with a name, for generated functions that must forward it.
    pub fn declaration(&self) -> String {
        if self.named {
            self.text.clone()
        } else {
            format!("{} {}", self.text, self.name)
        }
    }
    /// `declaration()` without `__grid_constant__`, for parameter lists of things that are not
    /// kernels (function pointer types, host declarations), where the qualifier is not allowed.
    pub fn plain_declaration(&self) -> String {
        let d = self.declaration();
        match &self.grid_constant {
            Some(g) => crate::lang::without_grid_constant(&d, std::slice::from_ref(&g.spelling)),
            None => d,
        }
    }
    pub fn forward(&self) -> String {
        if self.pack {
            format!("{}...", self.name)
        } else {
            self.name.clone()
        }
    }
}

#[derive(Debug, Clone)]
pub struct TemplateParam {
    /// How the parameter is passed on as an explicit template argument: `T`, `N`, `Ts...`.
    pub arg: String,
    pub pack: bool,
    /// For a parameter written without a name (`std::enable_if_t<C, int> = 0`, `typename =
    /// void`): where its name goes in the source and the name it gets (`__cp_tparam1`), since
    /// the generated functions must pass it on.
    pub unnamed: Option<(usize, String)>,
}

/// A function definition or declaration with CUDA execution-space qualifiers.
#[derive(Debug, Clone)]
pub struct FunctionSite<'t> {
    pub name: String,
    /// Enclosing namespaces, outermost first (with those of a qualified name).
    pub scope: Vec<String>,
    /// A kernel defined with a qualified name, out of its namespace.
    pub qualified: Option<Qualified>,
    /// A member function (defined in a class, or out of it with a qualified name): called as
    /// `x.f()`, `p->f()` or, for `operator()`, `x(...)`, which calls by name do not see, so it
    /// can never be given the task context.
    pub member: bool,
    /// For a member defined in its class, that class's name (without template arguments).
    pub class: Option<String>,
    /// Declared `virtual`.
    pub is_virtual: bool,
    /// An explicit specialization (`template <> __global__ void k<float>(...)`).
    pub specialization: bool,
    /// An explicit specialization's written template arguments, `<float>`, with the brackets
    /// (none where they are left to deduction: `template <> __global__ void k(float*)`).
    pub specialized_args: Option<std::ops::Range<usize>>,
    /// The outermost node that belongs to this function: template or unbraced linkage included.
    pub outer: Node<'t>,
    /// The `function_definition` (or `declaration`) itself.
    pub func: Node<'t>,
    /// Where its specifiers start: `func`'s start, or the first of the execution-space macros
    /// in front of it (`GLOBAL static void k(...)`, which the grammar does not read as part of
    /// the definition; `parse::masked`). What is written before a definition goes here.
    pub head: usize,
    pub template: Option<Node<'t>>,
    pub template_params: Vec<TemplateParam>,
    pub linkage: Option<Linkage<'t>>,
    /// `__global__`, or the macro whose expansion holds it (a type macro, `KERNEL k(...)`, or
    /// an execution-space macro in front of the definition, `GLOBAL static void k(...)`): its
    /// bytes.
    pub global_kw: Option<std::ops::Range<usize>>,
    /// What `global_kw` becomes in the shared body.
    pub global_replacement: String,
    pub host: bool,
    pub launch_bounds: Vec<Node<'t>>,
    /// `__maxnreg__(N)` in the head or in front of it, and uses of macros standing for it or
    /// for `__launch_bounds__` (`LAUNCH_BOUNDS(256)`, `parse::attribute_macros`), all blanked
    /// for the grammar (`parse::masked`): kernel attributes, which the shared body must not
    /// carry and the wrappers keep.
    pub head_attributes: Vec<std::ops::Range<usize>>,
    pub declarator: Node<'t>,
    pub name_node: Node<'t>,
    pub params: Node<'t>,
    pub param_list: Vec<Param>,
    /// Preprocessor lines after the last parameter (`#endif`), like `Param::before`.
    pub params_after: String,
    pub body: Node<'t>,
    pub pragmas: Pragmas,
    /// Why this function's header cannot be rewritten (empty when it can).
    pub problems: Vec<Diagnostic>,
    /// A helper's definition that a preprocessor conditional crosses: the offset of the
    /// directive's line (`lang::unbalanced_conditional` over `definition_range`). Neither its
    /// live copy nor its task-context form can be made (`problems` says so for the latter).
    pub crossing_conditional: Option<usize>,
}

impl<'t> FunctionSite<'t> {
    pub fn is_template(&self) -> bool {
        self.template.is_some()
    }
    /// Where the template's head ends: after its parameter list, or after the requires clause
    /// that follows it. None for a non-template.
    pub fn template_head_end(&self) -> Option<usize> {
        let t = self.template?;
        let mut c = t.walk();
        t.children(&mut c)
            .filter(|n| matches!(n.kind(), "template_parameter_list" | "requires_clause"))
            .map(|n| n.end_byte())
            .filter(|&e| e <= self.head)
            .max()
    }
    /// The template head as written (`template <typename T, int = 3>\n`, up to the rest of
    /// the header), with a name given to each parameter written without one (`int
    /// __cp_tparam1 = 3`): what generated functions copy. Empty for a non-template.
    pub fn template_text(&self, src: &str) -> String {
        let Some(t) = self.template else {
            return String::new();
        };
        names_inserted(src, t.start_byte()..self.head, &self.template_params)
    }
    /// Edits that name the template parameters written without a name, in the function's own
    /// head (`template_text` names them the same way).
    pub fn template_name_edits(&self) -> Vec<crate::edit::Edit> {
        self.template_params
            .iter()
            .filter_map(|p| p.unnamed.as_ref())
            .map(|(at, name)| crate::edit::Edit::insert(*at, format!(" {name}")))
            .collect()
    }
    /// `T, N, Ts...`
    pub fn template_args(&self) -> String {
        self.template_params
            .iter()
            .map(|p| p.arg.as_str())
            .collect::<Vec<_>>()
            .join(", ")
    }
    /// `a, b, args...`
    pub fn forward_args(&self) -> String {
        self.join_params(Param::forward)
    }
    /// Parameter declarations, every one named.
    pub fn named_params(&self) -> String {
        self.join_params(Param::declaration)
    }
    /// `f` of each parameter, separated by commas, with the preprocessor lines of the list in
    /// their places (each on a line of its own, the comma after them: a parameter that a
    /// configuration leaves out takes its comma with it; the first parameter is never
    /// conditional, `scan`).
    pub fn join_params(&self, f: impl Fn(&Param) -> String) -> String {
        let mut out = String::new();
        for (i, p) in self.param_list.iter().enumerate() {
            if !p.before.is_empty() {
                out.push('\n');
                out.push_str(&p.before);
                out.push('\n');
            }
            if i > 0 {
                out.push_str(", ");
            }
            out.push_str(&f(p));
        }
        if !self.params_after.is_empty() {
            out.push('\n');
            out.push_str(&self.params_after);
            out.push('\n');
        }
        out
    }
    /// The name as written in the definition, with its qualifier (`ns::k`) where it has one.
    pub fn written_name(&self) -> std::ops::Range<usize> {
        self.qualified
            .as_ref()
            .map_or(self.name_node.byte_range(), |q| q.range.clone())
    }

    /// The definition's whole text, from its first word (a template's or a linkage's, where
    /// they come first) to its closing brace: what a copy of it (a helper's live copy,
    /// `rewrite::predicate`) repeats.
    pub fn definition_range(&self) -> std::ops::Range<usize> {
        self.outer.start_byte().min(self.head)..self.outer.end_byte()
    }

    /// For a helper: where a conditional crosses its definition (`crossing_conditional`),
    /// with the problem that keeps its task-context form from being made. That form is its
    /// definition edited in place, a template head before it and a forwarder after it that
    /// repeats its head (`rewrite::helper`), and its live copy repeats it whole
    /// (`rewrite::predicate`): a conditional that the definition opens or closes without the
    /// other half (a head chosen by `#ifdef` ... `#else` ... `#endif` with the body's brace in
    /// each branch) would be cut by the edits, or repeated by half.
    pub fn note_crossing_conditional(&mut self, src: &str) {
        let definition = self.definition_range();
        let Some(at) = crate::lang::unbalanced_conditional(&src[definition.clone()]) else {
            return;
        };
        let at = definition.start + at;
        let end = src[at..].find('\n').map_or(src.len(), |e| at + e);
        self.crossing_conditional = Some(at);
        self.problems.push(
            Diagnostic::new(
                Code::ParseErrorInKernel,
                format!("`{}`: a preprocessor conditional crosses its definition, which its task-context form edits around", self.name),
            )
            .label(at..end, "this directive's conditional opens or closes outside the definition")
            .help("let each branch of the conditional hold a whole definition, or let a macro choose what differs in the head"),
        );
    }

    /// Whether, as a helper, it can be given the task context (its context form is a template
    /// with a context parameter): not `__host__ __device__`, not `extern "C"` (templates have C++
    /// linkage), and a header the rewrite can read. A member only where it is a named function
    /// defined in its class (`context_member`).
    pub fn can_take_ctx(&self) -> bool {
        self.problems.is_empty()
            && !self.host
            && self.linkage.is_none()
            && (!self.member || self.context_member())
    }
    /// A member that can take the task context: defined in its class (its context form and
    /// the forwarder go beside it there), named or the function-call operator (not another
    /// operator, which calls reach without its name; not a constructor or destructor, which
    /// run implicitly), and not virtual (a
    /// member template cannot be). Its calls pass the context only where the class they call
    /// is certain (`callgraph::called_class`).
    pub fn context_member(&self) -> bool {
        let Some(class) = &self.class else {
            return false;
        };
        let k = crate::lang::kinds();
        // The function-call operator too: its calls (`f(x)` of an object) pass the context
        // through `cupreempt::call_functor` (`CallGraph::functor_calls`).
        let named = [k.identifier, k.field_identifier].contains(&self.name_node.kind_id())
            || self.name == super::callgraph::FUNCTOR_CALL;
        self.member && self.qualified.is_none() && named && self.name != *class && !self.is_virtual
    }
    /// Its own launch bounds where the capped wrapper can raise them: one `__launch_bounds__(T)`
    /// or `(T, M)` (not a cluster's third argument), written among the specifiers before its
    /// name, with no preprocessor line among them (a configuration without them would get a
    /// wrapper capped at nothing). The node and its arguments, T then M if written.
    pub fn raisable_bounds(&self, src: &str) -> Option<(Node<'t>, Vec<Node<'t>>)> {
        let [bounds] = self.launch_bounds.as_slice() else {
            return None;
        };
        let head = self.head..self.written_name().start;
        if bounds.start_byte() < head.start
            || bounds.end_byte() > head.end
            || src[head].contains('#')
        {
            return None;
        }
        let mut c = bounds.walk();
        let args: Vec<Node<'t>> = bounds
            .named_children(&mut c)
            .filter(|a| a.kind() != "comment")
            .collect();
        (1..=2).contains(&args.len()).then_some((*bounds, args))
    }
    /// Whether preprocessor lines choose some of its parameters.
    pub fn has_conditional_params(&self) -> bool {
        !self.params_after.is_empty() || self.param_list.iter().any(|p| !p.before.is_empty())
    }
}

#[derive(Debug, Clone)]
pub struct LaunchSite<'t> {
    pub call: Node<'t>,
    /// The callee's last name (`k` in `ns::k<float>`).
    pub name: String,
    /// Text before the name in the callee (`ns::`).
    pub qualifier: String,
    pub template_args: Option<Node<'t>>,
    /// The 2 to 4 expressions between `<<<` and `>>>`.
    pub config: Vec<Node<'t>>,
    pub args: Node<'t>,
    pub arg_count: usize,
    pub in_device_code: bool,
    pub in_error: bool,
    /// The local variable launched (`kernel` of `auto kernel = &k<T>; kernel<<<...>>>`), whose
    /// initializer gave `name` and `template_args` (kernel_pointer.rs).
    pub through_variable: Option<String>,
    /// The callee is a pointer the launching code holds (a parameter, a variable) that no
    /// initializer names a kernel for (kernel_pointer.rs, `is_object`).
    pub pointer_object: bool,
}

/// `src[range]` with the names of `params` written without one inserted where they go (an
/// insertion at `range.end` included: a copy that stops where a default argument begins).
pub fn names_inserted(
    src: &str,
    range: std::ops::Range<usize>,
    params: &[TemplateParam],
) -> String {
    let mut out = String::new();
    let mut at = range.start;
    for (pos, name) in params.iter().filter_map(|p| p.unnamed.as_ref()) {
        if *pos < range.start || *pos > range.end {
            continue;
        }
        out.push_str(&src[at..*pos]);
        out.push(' ');
        out.push_str(name);
        at = *pos;
    }
    out.push_str(&src[at..range.end]);
    out
}

/// The names of the functions at namespace scope that are no kernels (not among `kernels`, and
/// no `__global__` before the name): host functions and device helpers, defined or declared. A kernel template that
/// shares its name with one (faiss's `gatherReconstructByIds<T>`, a kernel, and the host
/// template of that name that launches it) makes `&name<T>` an overload set, which the launch
/// types' `auto` member cannot take (`KernelPlan::function_namesake`).
pub fn plain_function_names(
    root: Node,
    src: &str,
    kernels: &[&FunctionSite],
) -> std::collections::BTreeSet<String> {
    let mut out = std::collections::BTreeSet::new();
    if !src.contains("__global__") {
        return out;
    }
    let mut stack = vec![root];
    while let Some(n) = stack.pop() {
        if matches!(n.kind(), "function_definition" | "declaration") {
            // The kernels found, their execution space behind a macro or not.
            if kernels.iter().any(|k| k.func.id() == n.id()) {
                continue;
            }
            let Some(d) = crate::lang::function_declarator(n) else {
                continue;
            };
            let Some(name) = d.child_by_field_name("declarator") else {
                continue;
            };
            let name = match name.kind() {
                "template_function" => name.child_by_field_name("name").unwrap_or(name),
                _ => name,
            };
            if !crate::lang::has_word(&src[n.start_byte()..name.start_byte()], "__global__") {
                out.insert(src[name.byte_range()].to_string());
            }
        } else if crate::lang::scope_container(n.kind(), false) {
            let mut c = n.walk();
            stack.extend(n.children(&mut c));
        }
    }
    out
}
