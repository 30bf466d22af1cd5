//! Which values and which control flow may differ between the threads of one block.
//!
//! Conservative: a value is *uniform* only if it is built from names the analysis can prove
//! uniform: kernel parameters passed by value, the kernel's template parameters, locals whose
//! every write is uniform, `__constant__` variables, `const`/`constexpr` variables of the file
//! with an initializer, enumerators, macros of the file that expand to uniform values,
//! blockIdx/blockDim/gridDim/warpSize and the same asked of this thread block
//! (`block.group_index()`), literals and `sizeof`. Everything else is *varying*: threadIdx,
//! memory loads, calls to functions we do not know, anything written under
//! thread-dependent control, variables other threads may write (`__device__`, `__managed__`,
//! `__shared__`, non-const globals; a shared scalar's read where no thread can write it is the
//! exception, `broadcast`) and names the file does not declare (a macro or variable from a
//! header it cannot see). A wrong "varying" costs a predicated rewrite (a little speed);
//! a wrong "uniform" could deadlock, so every doubt goes to varying.

use super::flow::{enclosing_loop, guards, is_loop, Guard};
use super::macros::MacroFacts;
use crate::lang::{self, kinds, text};
use std::collections::{BTreeMap, BTreeSet, HashMap};
use tree_sitter::Node;

/// The functions of the files a file includes, as a call of one reads here: which arguments
/// each overload may write (a reference to non-`const`), and which are uniform helpers
/// (`helpers::uniform_helpers`, every definition in its file one). Batched kernels compute
/// their block's bounds with a header's helper (`blockIdx.x >= ceildiv(m, NB)`); unknown, its
/// call was a value that differs between threads, and a call that may write its arguments made
/// them so.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct IncludedFunctions {
    /// By unqualified name, one entry per overload: for each parameter whether the function may
    /// write the caller's variable through it.
    pub parameters: BTreeMap<String, Vec<Vec<bool>>>,
    /// Uniform helpers, by name.
    pub uniform: BTreeSet<String>,
    /// Names some file defines as a function that is no uniform helper.
    pub not_uniform: BTreeSet<String>,
    /// Functions that return a block reduction's value (`helpers::vote_helpers`), by name.
    pub votes: BTreeSet<String>,
}

impl IncludedFunctions {
    /// The functions one file's text defines or declares; `definitions` and `parameters`: its
    /// `#define`s (`program::IncludedMacros`). Only a text that names `__device__` is parsed:
    /// a function without it is no device code's to call, and most of a large program's
    /// headers have none.
    pub fn of(
        text: &str,
        definitions: &[(String, String)],
        parameters: &[(String, Vec<String>)],
    ) -> IncludedFunctions {
        let mut out = IncludedFunctions::default();
        if !text.contains("__device__") {
            return out;
        }
        let src = crate::parse::without_carriage_returns(text);
        let parsed = crate::parse::parse(&src);
        let root = parsed.tree.root_node();
        let macros = super::macros::close(super::macros::of_lists(definitions, parameters));
        let declared = file_declared(root, &src);
        let uniform = helpers::uniform_helpers(root, &src, &declared, &macros, &BTreeSet::new());
        out.votes = helpers::vote_helpers(root, &src).into_iter().collect();
        for (name, overloads) in file_functions(root, &src, &macros) {
            if uniform.contains(&name) {
                out.uniform.insert(name.clone());
            } else {
                out.not_uniform.insert(name.clone());
            }
            out.parameters.insert(name, overloads);
        }
        out
    }

    /// `other`'s functions beside these: overloads add up, and a name is a uniform helper only
    /// if no file defines it otherwise.
    pub fn merge(&mut self, other: &IncludedFunctions) {
        self.uniform.extend(other.uniform.iter().cloned());
        self.votes.extend(other.votes.iter().cloned());
        self.add_declarations(other);
    }

    /// What two contexts share: every overload of either, and as uniform helpers only the
    /// names that are one in both.
    pub fn meet(mut self, other: &IncludedFunctions) -> IncludedFunctions {
        self.uniform.retain(|n| other.uniform.contains(n));
        self.votes.retain(|n| other.votes.contains(n));
        self.add_declarations(other);
        self
    }

    /// `other`'s overloads and the names it defines otherwise than as uniform helpers.
    fn add_declarations(&mut self, other: &IncludedFunctions) {
        for (name, overloads) in &other.parameters {
            self.parameters
                .entry(name.clone())
                .or_default()
                .extend(overloads.iter().cloned());
        }
        self.not_uniform.extend(other.not_uniform.iter().cloned());
        let not = &self.not_uniform;
        self.uniform.retain(|n| !not.contains(n));
        let voting = &other.votes;
        self.votes
            .retain(|n| voting.contains(n) || !other.parameters.contains_key(n));
    }
}

/// What every kernel's analysis reads of the whole file, read once per file: its declarations
/// (`file_declared`), its functions' reference parameters (`file_functions`) and, on first
/// need, its uniform helpers (`helpers::uniform_helpers`). Read per kernel, a file of 1,600
/// small kernels took 10 s to check, four times as long as one of 800.
pub struct FileNames<'t, 'm> {
    root: Node<'t>,
    src: &'t str,
    macros: &'m BTreeMap<String, MacroFacts>,
    declared: Declared,
    /// The file's functions and the included files' (`IncludedFunctions::parameters`).
    functions: HashMap<String, Vec<Vec<bool>>>,
    /// The included files' uniform helpers whose names this file neither defines nor declares.
    included_helpers: BTreeSet<String>,
    helpers: std::cell::OnceCell<std::collections::HashSet<String>>,
    /// The included files' functions that return a block reduction's value, which this file
    /// does not define.
    included_votes: BTreeSet<String>,
    votes: std::cell::OnceCell<std::collections::HashSet<String>>,
    /// The type names the file declares (`names::file_type_names`).
    types: std::cell::OnceCell<BTreeSet<String>>,
}

impl<'t, 'm> FileNames<'t, 'm> {
    /// `root`: the file's syntax tree; `macros`: the file's macros, as the kernels' analyses
    /// read them.
    /// `included`: the functions of the files it includes (`IncludedFunctions`).
    pub fn new(
        root: Node<'t>,
        src: &'t str,
        macros: &'m BTreeMap<String, MacroFacts>,
        included: &'m IncludedFunctions,
    ) -> Self {
        let mut functions = file_functions(root, src, macros);
        let included_helpers = included
            .uniform
            .iter()
            .filter(|n| !functions.contains_key(*n))
            .cloned()
            .collect();
        let included_votes = included
            .votes
            .iter()
            .filter(|n| !functions.contains_key(*n))
            .cloned()
            .collect();
        for (name, overloads) in &included.parameters {
            functions
                .entry(name.clone())
                .or_default()
                .extend(overloads.iter().cloned());
        }
        FileNames {
            root,
            src,
            macros,
            declared: file_declared(root, src),
            functions,
            included_helpers,
            helpers: std::cell::OnceCell::new(),
            included_votes,
            votes: std::cell::OnceCell::new(),
            types: std::cell::OnceCell::new(),
        }
    }

    /// Whether `callee`, the callee of a call, is a type in parentheses: `(scalar_t)(p.f)[i]`
    /// is a C cast of `(p.f)[i]`, which the grammar reads as a call of `(scalar_t)`. A type:
    /// one the file declares (`names::file_type_names`: classes, `typedef`s, `using` aliases,
    /// template type parameters) or a standard scalar alias. A conversion writes nothing and
    /// its value is its operand's.
    fn parenthesized_type(&self, callee: Node) -> bool {
        let inner = lang::strip_parens(callee);
        if callee.kind() != "parenthesized_expression"
            || !matches!(inner.kind(), "identifier" | "type_identifier")
        {
            return false;
        }
        let name = text(inner, self.src);
        lang::SCALAR_TYPEDEFS.contains(&name)
            || self
                .types
                .get_or_init(|| file_type_names(self.root, self.src))
                .contains(name)
    }

    /// The file's macros, as given to `new`.
    pub fn macros(&self) -> &'m BTreeMap<String, MacroFacts> {
        self.macros
    }

    /// The file's text, as given to `new`.
    pub fn src(&self) -> &'t str {
        self.src
    }

    /// The functions that return a block reduction's value (`helpers::vote_helpers`), this
    /// file's and the included files'.
    fn vote_helpers(&self) -> &std::collections::HashSet<String> {
        self.votes.get_or_init(|| {
            let mut own = helpers::vote_helpers(self.root, self.src);
            own.extend(self.included_votes.iter().cloned());
            own
        })
    }

    fn uniform_helpers(&self) -> &std::collections::HashSet<String> {
        self.helpers.get_or_init(|| {
            let mut own = helpers::uniform_helpers(
                self.root,
                self.src,
                &self.declared,
                self.macros,
                &self.included_helpers,
            );
            own.extend(self.included_helpers.iter().cloned());
            own
        })
    }
}

pub struct Uniformity<'t, 'm> {
    src: &'t str,
    body: Node<'t>,
    macros: &'m BTreeMap<String, MacroFacts>,
    /// The file's names (`FileNames`).
    file: &'m FileNames<'t, 'm>,
    /// Names whose values may differ between threads, and where (`varying`).
    varying: Varying,
    /// Loops whose trip count may differ between threads (node ids).
    varying_loops: BTreeSet<usize>,
    /// Each `continue` of the body and the loop it continues. A `continue` leaves its loop's
    /// trip count to the loop's condition: one that some threads take and others not makes
    /// only what follows it in the loop's body differ (`after_varying_continue`).
    continues: Vec<(Node<'t>, Node<'t>)>,
    /// Names bound to the same object (a reference and what it refers to).
    aliases: Vec<(String, String)>,
    /// Names whose reads are uniform unless a write makes them varying (`varying` wins):
    /// parameters, template parameters, locals, constants of the file, enumerators.
    known: BTreeSet<String>,
    /// The kernel's variables that are constant in every declaration (`constant_names`): a
    /// call cannot write them through an argument.
    constants: BTreeSet<String>,
    /// Kernel parameters that point at memory the kernel only reads (`read_only_parameters`):
    /// a load through one at a uniform index is uniform.
    read_only: BTreeSet<String>,
    /// In the predicated form, where such a load is still made by every thread: before the
    /// body's first thread-dependent return (its byte offset) and outside every loop that holds
    /// one (their ranges). Returned threads skip later loads, so a value loaded there would differ
    /// between them and the live ones. `None` where a return exits the thread (the plain
    /// form's choice): every such load counts.
    loads_by_all: Option<(usize, Vec<std::ops::Range<usize>>)>,
    /// Whether the body calls a function of the file (`FileNames::functions`): only then are
    /// the file's uniform helpers read (`FileNames::uniform_helpers`).
    calls_file_function: bool,
    /// Locals that hold this thread block (`body::thread_block_variables`): their queries of
    /// the block's index and shape are uniform (`body::block_uniform_query`).
    thread_blocks: BTreeSet<String>,
    /// The variables a `for` declares in its head (`int i = 0`, `auto x : v`), by name: the
    /// loop's byte range. Each is a variable of its own (`scoped`): a second loop's `i`,
    /// counted under a thread-dependent condition, does not make the first loop's `i` vary.
    loop_scoped: HashMap<String, Vec<std::ops::Range<usize>>>,
    /// Reads of the body's shared scalars that every thread makes alike (`broadcast`), by
    /// start byte: not varying for being shared memory.
    broadcasts: BTreeSet<usize>,
    /// The parent of every node inside the body (by node id). tree-sitter finds a node's
    /// parent by descending from the root, so walking up with `Node::parent` costs the depth
    /// squared: a host-side mutant with 370 nested loops made `controlled` take 11 s.
    parents: HashMap<usize, Node<'t>>,
}

struct Assignment<'t> {
    target: String,
    value: Option<Node<'t>>,
    at: Node<'t>,
}

impl<'t, 'm> Uniformity<'t, 'm> {
    /// `all`: the body and its descendants, in pre-order; `thread_blocks`: its variables that
    /// hold this thread block (`body::thread_block_variables`).
    pub fn new(
        body: Node<'t>,
        all: &[Node<'t>],
        file: &'m FileNames<'t, 'm>,
        thread_blocks: BTreeSet<String>,
    ) -> Self {
        Self::with_exits(body, all, file, thread_blocks, true)
    }

    /// `returns_exit`: false for the predicated form, where a `return` only clears a flag and
    /// the thread goes on through the loops around it.
    pub fn with_exits(
        body: Node<'t>,
        all: &[Node<'t>],
        file: &'m FileNames<'t, 'm>,
        thread_blocks: BTreeSet<String>,
        returns_exit: bool,
    ) -> Self {
        Self::build(body, all, file, thread_blocks, returns_exit, None)
    }

    /// A helper's body as its live copy runs it (`predicate`, "synchronizing helpers"):
    /// threads may enter it returned, so no load in it is made by every thread, and its
    /// parameters are uniform only where every call passes a uniform value (those in
    /// `varying_params` are not). Pointer parameters give no uniform loads: the caller may
    /// write what they point at.
    pub fn for_live_helper(
        body: Node<'t>,
        all: &[Node<'t>],
        file: &'m FileNames<'t, 'm>,
        thread_blocks: BTreeSet<String>,
        varying_params: &BTreeSet<String>,
    ) -> Self {
        Self::build(body, all, file, thread_blocks, false, Some(varying_params))
    }

    fn build(
        body: Node<'t>,
        all: &[Node<'t>],
        file: &'m FileNames<'t, 'm>,
        thread_blocks: BTreeSet<String>,
        returns_exit: bool,
        helper_varying: Option<&BTreeSet<String>>,
    ) -> Self {
        let (src, macros) = (file.src, file.macros);
        let mut u = Uniformity {
            src,
            body,
            macros,
            file,
            varying: Varying::default(),
            varying_loops: BTreeSet::new(),
            continues: Vec::new(),
            aliases: Vec::new(),
            known: BTreeSet::new(),
            constants: BTreeSet::new(),
            read_only: BTreeSet::new(),
            loads_by_all: None,
            calls_file_function: false,
            thread_blocks,
            loop_scoped: loop_scoped_variables(all, src),
            broadcasts: BTreeSet::new(),
            parents: parents_within(body),
        };
        // A live helper's loads count nowhere (`loads_by_all` below), its broadcasts neither.
        if helper_varying.is_none() {
            u.broadcasts = broadcast::broadcast_reads(body, all, src, &u.parents, macros);
        }
        u.known = u.known_names(&file.declared, all);
        u.calls_file_function = all.iter().any(|n| {
            n.kind_id() == kinds().call_expression
                && n.child_by_field_id(crate::lang::fields().function)
                    .is_some_and(|c| file.functions.contains_key(text(c, src)))
        });
        if let Some(varying) = helper_varying {
            if let Some(function) = body.parent() {
                u.known
                    .extend(const_value_reference_parameters(function, src));
            }
            u.known.retain(|n| !varying.contains(n));
            if let Some(function) = body.parent() {
                u.constants = constant_names(function, all, src, &file.declared.other);
            }
            u.loads_by_all = Some((0, Vec::new()));
        } else if let Some(function) = body.parent() {
            u.constants = constant_names(function, all, src, &file.declared.other);
            u.read_only = read_only_parameters(function, src);
            u.read_only
                .extend(unwritten_parameters(function, all, src, file.macros));
            u.read_only
                .extend(unwritten_parameter_fields(function, all, src, file.macros));
            if !u.read_only.is_empty() {
                let locals = read_only_locals(all, src, &u.read_only, function);
                u.read_only.extend(locals);
            }
            let moved = repointed(&u.read_only, all, src);
            u.read_only.retain(|n| !moved.contains(n));
            if !returns_exit {
                // The returns that make threads differ: those the plain form's analysis finds
                // under thread-dependent control (a block-uniform return leaves no thread
                // behind that skipped what the others load).
                let plain = Self::with_exits(body, all, file, u.thread_blocks.clone(), true);
                let mut returns: Vec<usize> = all
                    .iter()
                    .filter(|n| n.kind_id() == kinds().return_statement)
                    .filter(|n| plain.controlled(**n, None))
                    .map(|n| n.start_byte())
                    .collect();
                if returns.is_empty() {
                    returns = all
                        .iter()
                        .filter(|n| n.kind_id() == kinds().return_statement)
                        .map(|n| n.start_byte())
                        .collect();
                }
                let loops = all
                    .iter()
                    .filter(|n| is_loop(**n))
                    .map(|n| n.byte_range())
                    .filter(|r| returns.iter().any(|at| r.contains(at)))
                    .collect();
                let first = returns.iter().copied().min().unwrap_or(0);
                u.loads_by_all = Some((first, loops));
            }
        }
        let assignments = u.assignments(all);
        let loops: Vec<Node> = all.iter().copied().filter(|n| is_loop(*n)).collect();
        let exits: Vec<Node> = all
            .iter()
            .copied()
            .filter(|n| {
                let kind = n.kind();
                (returns_exit && n.kind_id() == kinds().return_statement)
                    || kind == "break_statement"
                    || kind == "goto_statement"
            })
            .collect();
        u.continues = all
            .iter()
            .filter(|n| n.kind() == "continue_statement")
            .filter_map(|c| {
                enclosing_loop(*c, |n| u.parents.get(&n.id()).copied()).map(|l| (*c, l))
            })
            .collect();
        loop {
            let mut changed = false;
            for a in &assignments {
                let at = u.branches(a.at);
                if u.varying.covers(&a.target, &at) {
                    continue;
                }
                if a.value.is_some_and(|v| u.expr_varying(v)) || u.controlled(a.at, None) {
                    u.varying.insert(a.target.clone(), at.clone());
                    for (x, y) in &u.aliases {
                        if *x == a.target {
                            u.varying.insert(y.clone(), at.clone());
                        } else if *y == a.target {
                            u.varying.insert(x.clone(), at.clone());
                        }
                    }
                    changed = true;
                }
            }
            for l in &loops {
                if u.varying_loops.contains(&l.id()) {
                    continue;
                }
                let cond = l
                    .child_by_field_id(crate::lang::fields().condition)
                    .or_else(|| l.child_by_field_id(crate::lang::fields().right));
                let exit_varies = exits.iter().any(|e| {
                    l.byte_range().contains(&e.start_byte())
                        && e.id() != l.id()
                        && u.controlled(*e, Some(*l))
                });
                if cond.is_some_and(|c| u.expr_varying(c)) || exit_varies {
                    u.varying_loops.insert(l.id());
                    changed = true;
                }
            }
            if !changed {
                return u;
            }
        }
    }

    /// Every write to a variable the body makes, as far as the analysis can follow it; a
    /// variable written in a way it cannot follow (through a pointer, by inline PTX, by a call
    /// that may bind it to a reference, through an expression it cannot resolve) is varying
    /// from the start. A reference names the same object as what it is bound to: the two are
    /// written together (`aliases`).
    fn assignments(&mut self, all: &[Node<'t>]) -> Vec<Assignment<'t>> {
        let k = kinds();
        let f = crate::lang::fields();
        let mut out = Vec::new();
        let mut aliases: Vec<(String, String)> = Vec::new();
        for &n in all {
            let id = n.kind_id();
            if id == k.init_declarator || id == k.for_range_loop {
                let value_field = if id == k.init_declarator {
                    f.value
                } else {
                    f.right
                };
                let value = n.child_by_field_id(value_field);
                let Some(declarator) = n.child_by_field_id(f.declarator) else {
                    continue;
                };
                let names = declared_names(declarator, self.src);
                if id == k.init_declarator {
                    self.constructor_writes(n, value.into_iter().collect());
                }
                // A `constexpr` variable's value is a constant expression, the same in every
                // thread whatever it calls (`constexpr int nbatch = get_nbatch(D);`, a
                // function of another header): only where it is declared can differ.
                let constant = id == k.init_declarator
                    && !contains_kind(declarator, k.reference_declarator)
                    && self.parents.get(&n.id()).is_some_and(|d| {
                        d.kind_id() == k.declaration && lang::is_constexpr_declaration(*d, self.src)
                    });
                let value = if constant { None } else { value };
                if contains_kind(declarator, k.reference_declarator) {
                    // `T& r = x`, `auto& [a, b] = s`, `for (auto& x : xs)`: the names alias
                    // whatever the initializer names.
                    // Each name as the variable it is there (`scoped`: a range-`for`'s own).
                    let bound_at = value.map_or(n.start_byte(), |v| v.start_byte());
                    for v in value.map(|v| identifiers(v, self.src)).unwrap_or_default() {
                        for name in &names {
                            aliases.push((
                                self.scoped(name, n.start_byte()),
                                self.scoped(&v, bound_at),
                            ));
                        }
                    }
                }
                for target in names {
                    if id == k.for_range_loop {
                        // Each round's value is an element of the range, read from memory
                        // that writes through subscripts change unseen (`a[0] = tid;`).
                        self.mark(target, n);
                        continue;
                    }
                    out.push(Assignment {
                        target,
                        value,
                        at: n,
                    });
                }
            } else if id == k.function_declarator {
                // `S w(m);` reads as the declaration of a function `w` with a parameter of
                // type `m` (the grammar cannot tell a type from a variable): in a body it is
                // a constructor's call, its "types" the arguments.
                if let Some(params) = n.child_by_field_id(f.parameters) {
                    let mut c = params.walk();
                    let args: Vec<Node> = params
                        .named_children(&mut c)
                        .filter(|p| {
                            p.kind() == "parameter_declaration"
                                && p.child_by_field_id(f.declarator).is_none()
                        })
                        .filter_map(|p| p.child_by_field_id(f.r#type))
                        .filter(|t| t.kind_id() == k.type_identifier)
                        .collect();
                    self.constructor_writes(n, args);
                }
            } else if id == k.declaration && text(n, self.src).contains("__shared__") {
                // Shared memory holds data written by any thread.
                for d in lang::declarators(n) {
                    if let Some(name) = lang::declarator_name(d) {
                        self.mark(text(name, self.src).into(), n);
                    }
                }
            } else if id == k.declaration {
                // `static`/`extern`/`__device__` locals live as long as the program and any
                // thread may write them, unless they are constants.
                let mut decl = Declared::default();
                if declare(n, self.src, false, &mut decl) {
                    for name in decl.other {
                        self.mark(name, n);
                    }
                }
                // `if (int x = v)`: the condition's declaration holds its value itself.
                if let (Some(d), Some(value)) = (
                    n.child_by_field_id(f.declarator),
                    n.child_by_field_id(f.value),
                ) {
                    for target in declared_names(d, self.src) {
                        out.push(Assignment {
                            target,
                            value: Some(value),
                            at: n,
                        });
                    }
                }
            } else if id == k.assignment_expression || id == k.update_expression {
                let Some(target) = n
                    .child_by_field_id(f.left)
                    .or_else(|| n.child_by_field_id(f.argument))
                else {
                    continue;
                };
                match written_local(target, self.src) {
                    Written::Local(name) => {
                        let value = if id == k.assignment_expression {
                            n.child_by_field_id(f.right)
                        } else {
                            None
                        };
                        out.push(Assignment {
                            target: name,
                            value,
                            at: n,
                        });
                    }
                    Written::Memory => {}
                    // `sAB(i, j) = v` through `#define sAB(i, j) sAB[(j)*ld + (i)]`: an element.
                    Written::Unknown if self.subscript_macro_use(target) => {}
                    // `(c ? a : b) = v`, `reinterpret_cast<int&>(t) = v`: any of them.
                    Written::Unknown => {
                        for name in identifiers(target, self.src) {
                            self.mark(name, n);
                        }
                    }
                }
            } else if id == k.pointer_expression
                && n.child_by_field_id(f.operator)
                    .is_some_and(|o| text(o, self.src) == "&")
            {
                // `helper(&x)`: a uniform helper writes the local through an out-parameter
                // (`helpers`), as it writes a reference parameter: an assignment of the call.
                if let Some(call) = self.uniform_helper_call_of(n) {
                    if let Some(Written::Local(target)) = n
                        .child_by_field_id(f.argument)
                        .filter(|a| !self.constant(*a))
                        .map(|a| written_local(a, self.src))
                    {
                        out.push(Assignment {
                            target,
                            value: Some(call),
                            at: call,
                        });
                        continue;
                    }
                }
                // Written through a pointer somewhere we cannot follow (a constant cannot be).
                match n
                    .child_by_field_id(f.argument)
                    .filter(|a| !self.constant(*a))
                    .map(|a| (a, written_local(a, self.src)))
                {
                    Some((_, Written::Local(name))) => self.mark(name, n),
                    // `&sAB(kv, j)`: an element's address, as `&a[i]`'s.
                    Some((a, Written::Unknown)) if self.subscript_macro_use(a) => {}
                    Some((a, Written::Unknown)) => {
                        for name in identifiers(a, self.src) {
                            self.mark(name, n);
                        }
                    }
                    Some((_, Written::Memory)) | None => {}
                }
            } else if id == k.gnu_asm_output_operand {
                // Inline PTX writes its outputs with values we do not read.
                if let Some(v) = n.child_by_field_id(f.value) {
                    for name in identifiers(v, self.src) {
                        self.mark(name, n);
                    }
                }
            } else if id == k.call_expression {
                self.call_writes(n, &mut out);
            }
        }
        // Each target as the variable it names there (`scoped`), once.
        for a in &mut out {
            a.target = self.scoped(&a.target, a.at.start_byte());
        }
        // A write to one name of an alias group is a write to all of them.
        let mut extra = Vec::new();
        for a in &out {
            for (x, y) in &aliases {
                for (from, to) in [(x, y), (y, x)] {
                    if *from == a.target {
                        extra.push(Assignment {
                            target: to.clone(),
                            value: a.value,
                            at: a.at,
                        });
                    }
                }
            }
        }
        out.extend(extra);
        // Both names of an alias pair varying wherever one is (everywhere: a reference may
        // be bound in one branch and used in another).
        loop {
            let before = self.varying.changes();
            for (x, y) in &aliases {
                if self.varying.anywhere(x) || self.varying.anywhere(y) {
                    self.varying.insert_everywhere(x.clone());
                    self.varying.insert_everywhere(y.clone());
                }
            }
            if self.varying.changes() == before {
                break;
            }
        }
        self.aliases = aliases;
        out
    }

    /// A call may write its arguments (a non-const reference parameter) and, for `x.f()`, its
    /// object: those variables are varying unless the function is known to take values only.
    ///
    /// A uniform helper's writes to the caller's locals are assignments of the call's value
    /// (`helpers`): uniform where every argument is.
    fn call_writes(&mut self, call: Node<'t>, out: &mut Vec<Assignment<'t>>) {
        let f = crate::lang::fields();
        let Some(callee) = call.child_by_field_id(f.function) else {
            return;
        };
        let k = kinds();
        if callee.kind_id() == k.field_expression {
            if let Some(object) = callee.child_by_field_id(f.argument).filter(|_| {
                callee
                    .child_by_field_id(f.operator)
                    .is_some_and(|o| text(o, self.src) == ".")
            }) {
                if let Written::Local(name) = written_local(object, self.src) {
                    self.mark(name, call);
                }
            }
        }
        // A cast to a value type (`reinterpret_cast<int32_t*>(params.dst)`) copies its operand;
        // only a cast to a reference could hand it on to be written.
        if lang::is_named_cast(callee, self.src)
            && callee
                .child_by_field_id(f.arguments)
                .is_some_and(|t| !text(t, self.src).contains('&'))
        {
            return;
        }
        let name = text(callee, self.src);
        if lang::UNIFORM_FUNCTIONS.contains(&name)
            || self.file.parenthesized_type(callee)
            || lang::is_pure_function(name)
            || lang::is_by_value_function(name)
            || lang::BARRIER_FUNCTIONS.iter().any(|(b, _)| *b == name)
        {
            return;
        }
        if macro_writes_nothing(self.macros, name, 0) {
            return;
        }
        let Some(args) = call.child_by_field_id(f.arguments) else {
            return;
        };
        // A function of the file: its parameters say which arguments it may write (every
        // overload counted, and one with too few parameters for the call may write them all).
        // `f(...)`, `ns::f(...)`, `f<T>(...)`.
        let function_name = match callee.kind() {
            "template_function" => callee.child_by_field_id(f.name).map(|n| text(n, self.src)),
            _ if callee.kind_id() == k.identifier || callee.kind_id() == k.qualified_identifier => {
                Some(name)
            }
            _ => None,
        };
        // Not a variable of that name (a functor, a lambda), which the call would be.
        let overloads = function_name
            .filter(|n| !self.known.contains(*n))
            .and_then(|n| {
                self.file
                    .functions
                    .get(n.rsplit("::").next().unwrap_or(n).trim())
            });
        let mut c = args.walk();
        let count = args
            .named_children(&mut c)
            .filter(|a| a.kind() != "comment")
            .count();
        let may_write = |i: usize| match overloads {
            Some(list) => list
                .iter()
                .any(|params| params.get(i).copied().unwrap_or(params.len() < count)),
            None => true,
        };
        let mut c = args.walk();
        let written: Vec<Node> = args
            .named_children(&mut c)
            .filter(|a| a.kind() != "comment")
            .enumerate()
            .filter(|(i, _)| may_write(*i))
            .map(|(_, a)| a)
            .collect();
        // Not `ns::f`: the file's `f` by name, but perhaps another namespace's, unread.
        let uniform_helper =
            unqualified_callee(callee, self.src).is_some_and(|n| self.uniform_helper(n));
        for a in written {
            match written_local(a, self.src) {
                Written::Local(target) if uniform_helper && !self.constant(a) => {
                    out.push(Assignment {
                        target,
                        value: Some(call),
                        at: call,
                    })
                }
                _ => self.argument_writes(a),
            }
        }
    }

    /// The call of a uniform helper that `arg` is an argument of, itself (not inside one).
    fn uniform_helper_call_of(&self, arg: Node<'t>) -> Option<Node<'t>> {
        let list = self.parents.get(&arg.id())?;
        if list.kind() != "argument_list" {
            return None;
        }
        let call = *self.parents.get(&list.id())?;
        let callee = call.child_by_field_id(crate::lang::fields().function)?;
        (call.kind_id() == kinds().call_expression
            && unqualified_callee(callee, self.src).is_some_and(|n| self.uniform_helper(n)))
        .then_some(call)
    }

    /// Whether a call of `name` (unqualified, `unqualified_callee`) is a call of a uniform
    /// helper, not of a variable (a functor, a lambda) of that name.
    fn uniform_helper(&self, name: &str) -> bool {
        self.calls_file_function
            && !self.known.contains(name)
            && self.file.uniform_helpers().contains(name)
    }

    /// `S w(m);`, `S w{m};`, `S w = {m};`: a constructor of a class may take `m` by reference
    /// and write it, as a call may. A scalar, an array of scalars or a CUDA vector type
    /// (`float4 v = {x, y, z, w}`) is built from values. `declarator`: the init or function
    /// declarator; `values`: its argument or initializer list, or the names the grammar read
    /// as parameter types.
    fn constructor_writes(&mut self, declarator: Node<'t>, values: Vec<Node<'t>>) {
        let mut args = Vec::new();
        for v in values {
            if matches!(v.kind(), "argument_list" | "initializer_list") {
                let mut c = v.walk();
                args.extend(v.named_children(&mut c).filter(|a| a.kind() != "comment"));
            } else if v.kind_id() == kinds().type_identifier {
                args.push(v);
            }
        }
        if args.is_empty() {
            return;
        }
        let ty = self
            .parents
            .get(&declarator.id())
            .and_then(|d| d.child_by_field_id(crate::lang::fields().r#type));
        let by_value = ty.is_none_or(|t| {
            matches!(t.kind(), "primitive_type" | "sized_type_specifier")
                || lang::is_vector_type(text(t, self.src))
        });
        if by_value {
            return;
        }
        for a in args {
            if a.kind_id() == kinds().type_identifier {
                self.mark(text(a, self.src).to_string(), a);
            } else {
                self.argument_writes(a);
            }
        }
    }

    /// Makes varying what a callee may write through the argument `a`: the variable an lvalue
    /// names or whose address it takes. `&a[i]` and `&p->f` hand it memory (neither `a` nor
    /// `i` can be written through the pointer); `c ? x : y` either branch; a `const` variable
    /// nothing.
    fn argument_writes(&mut self, a: Node<'t>) {
        let f = crate::lang::fields();
        if self.constant(a) {
            return;
        }
        let stripped = lang::strip_parens(a);
        if stripped.kind_id() == kinds().conditional_expression {
            for branch in [f.consequence, f.alternative] {
                if let Some(b) = stripped.child_by_field_id(branch) {
                    self.argument_writes(b);
                }
            }
            return;
        }
        let (a, pointed) = match address_operand(a, self.src) {
            Some(operand) => (operand, true),
            None => (a, false),
        };
        match written_local(a, self.src) {
            Written::Local(name) => self.mark(name, a),
            Written::Memory => {}
            // `&sAB(kv, j)`: the element's address, as `&a[i]`'s.
            Written::Unknown if self.subscript_macro_use(a) => {}
            Written::Unknown => {
                // An expression yields a temporary; only an lvalue can bind to a reference.
                if pointed || is_lvalue_shape(a) {
                    for name in identifiers(a, self.src) {
                        if !self.constants.contains(&name) {
                            self.mark(name, a);
                        }
                    }
                }
            }
        }
    }

    /// Whether `target` is a use of a function-like macro of one definition that writes
    /// nothing and stands for one array element (`subscript_text`): assigning it writes that
    /// element, not the macro's arguments.
    fn subscript_macro_use(&self, target: Node) -> bool {
        let target = lang::strip_parens(target);
        if target.kind_id() != kinds().call_expression {
            return false;
        }
        let Some(callee) = target.child_by_field_id(crate::lang::fields().function) else {
            return false;
        };
        element_macro(self.macros, text(callee, self.src))
    }

    /// Whether `n` names a constant variable itself (`constants`) or takes its address,
    /// parenthesized or not; not a member of one (a `mutable` member may change), except the
    /// built-in variables' (`blockIdx.x`: they are `const`, members and all).
    fn constant(&self, n: Node) -> bool {
        let f = crate::lang::fields();
        let mut x = n;
        let mut member = false;
        loop {
            let inner = if x.kind() == "parenthesized_expression" {
                x.named_child(0)
            } else if x.kind_id() == kinds().pointer_expression
                && x.child_by_field_id(f.operator)
                    .is_some_and(|o| text(o, self.src) == "&")
            {
                x.child_by_field_id(f.argument)
            } else if x.kind_id() == kinds().field_expression
                && x.child_by_field_id(f.operator)
                    .is_some_and(|o| text(o, self.src) == ".")
            {
                member = true;
                x.child_by_field_id(f.argument)
            } else {
                break;
            };
            match inner {
                Some(i) => x = i,
                None => return false,
            }
        }
        if x.kind_id() != kinds().identifier {
            return false;
        }
        let name = text(x, self.src);
        let builtin = lang::UNIFORM_BUILTINS.contains(&name) || name == "threadIdx";
        builtin && !self.known.contains(name) || !member && self.constants.contains(name)
    }

    /// `name` is varying where `at` is compiled (a write the analysis cannot follow).
    fn mark(&mut self, name: String, at: Node) {
        let name = self.scoped(&name, at.start_byte());
        let at = self.branches(at);
        self.varying.insert(name, at);
    }

    /// The variable `name` names at byte `at`: the innermost `for` around `at` that declares
    /// it in its head (`name@start`), else the body's or the file's `name`.
    fn scoped(&self, name: &str, at: usize) -> String {
        self.loop_scoped
            .get(name)
            .and_then(|ranges| {
                ranges
                    .iter()
                    .filter(|r| r.contains(&at))
                    .min_by_key(|r| r.len())
            })
            .map_or_else(|| name.to_string(), |r| format!("{name}@{}", r.start))
    }

    /// Where `n` is compiled: the body's `#if` chains that hold it and in which branch
    /// (`varying::Branches`).
    fn branches(&self, n: Node) -> Branches {
        let alternative = crate::lang::fields().alternative;
        let mut out = Branches::new();
        let mut child = n;
        while let Some(&p) = self.parents.get(&child.id()) {
            if matches!(
                p.kind(),
                "preproc_if" | "preproc_ifdef" | "preproc_elif" | "preproc_elifdef"
            ) {
                let alt = p
                    .child_by_field_id(alternative)
                    .is_some_and(|a| a.id() == child.id());
                out.push((p.id(), alt));
            }
            child = p;
        }
        out.sort_unstable();
        out
    }

    /// Whether the value of `n` may differ between threads of a block.
    pub fn expr_varying(&self, n: Node) -> bool {
        let k = kinds();
        let f = crate::lang::fields();
        let at = self.branches(n);
        let mut stack = vec![n];
        while let Some(x) = stack.pop() {
            let id = x.kind_id();
            let operator = || x.child_by_field_id(f.operator).map(|o| text(o, self.src));
            if id == k.identifier {
                if self.broadcasts.contains(&x.start_byte()) && self.loaded_by_all(x.start_byte()) {
                    continue;
                }
                let name = text(x, self.src);
                let key = self.scoped(name, x.start_byte());
                if self.variable_varying(name, &key, &at, 0) {
                    return true;
                }
                continue;
            } else if id == k.subscript_expression {
                // A memory load: uniform only through a read-only parameter, at a uniform
                // index (both checked as the expression's parts).
                if !x
                    .child_by_field_id(f.argument)
                    .is_some_and(|b| self.read_only_base(b))
                {
                    return true;
                }
            } else if id == k.lambda_expression {
                return true; // code we do not follow
            } else if id == k.field_expression {
                if operator() == Some("->")
                    && !x
                        .child_by_field_id(f.argument)
                        .is_some_and(|b| self.read_only_base(b))
                {
                    return true;
                }
                // `s.x`: the object's value; the field's name is no variable.
                stack.extend(x.child_by_field_id(f.argument));
                continue;
            } else if id == k.pointer_expression && operator() == Some("*") {
                if !x
                    .child_by_field_id(f.argument)
                    .is_some_and(|b| self.read_only_base(b))
                {
                    return true;
                }
            } else if id == k.call_expression {
                if super::body::block_uniform_query(x, self.src, &self.thread_blocks) {
                    continue;
                }
                let callee = x.child_by_field_id(f.function);
                let name = callee.map(|c| text(c, self.src));
                // `__ldg(&p[i])`, `__ldg(p + i)`: a load through the read-only cache.
                let read_only_load = name == Some("__ldg")
                    && x.child_by_field_id(f.arguments).is_some_and(|args| {
                        lang::count_named(args) == 1
                            && args
                                .named_child(0)
                                .is_some_and(|a| self.read_only_address(a))
                    });
                // A block reduction, or a function that returns one, gives every thread of the
                // block one value, whatever its arguments.
                let vote = name.is_some_and(|n| helpers::BLOCK_VOTES.contains(&n))
                    || callee
                        .and_then(|c| unqualified_callee(c, self.src))
                        .is_some_and(|n| self.file.vote_helpers().contains(n));
                if vote {
                    continue;
                }
                // `static_cast<T>(v)`: the value decides, as for `(T)v`; so does `(T)(v)`.
                if callee.is_some_and(|c| {
                    lang::is_named_cast(c, self.src) || self.file.parenthesized_type(c)
                }) {
                    stack.extend(x.child_by_field_id(f.arguments));
                    continue;
                }
                // A pure function (math, constructors) or a uniform helper of uniform arguments
                // gives one value.
                let helper = callee
                    .and_then(|c| unqualified_callee(c, self.src))
                    .is_some_and(|n| self.uniform_helper(n));
                let pure = helper
                    || name.is_some_and(|n| {
                        lang::UNIFORM_FUNCTIONS.contains(&n)
                            || lang::is_pure_function(n)
                            || self.pure_function_macro(n, &at, 0)
                    });
                if !read_only_load && !pure {
                    return true;
                }
                stack.extend(x.child_by_field_id(f.arguments));
                continue;
            } else if id == k.qualified_identifier {
                // `ns::N`, `E::A`: the name decides; the scope names no value.
                stack.extend(x.child_by_field_id(f.name));
                continue;
            }
            match x.kind() {
                // The operand is not evaluated: the result is a constant.
                "sizeof_expression" | "alignof_expression" => continue,
                // `(T)v`: the value decides; the type names no value.
                "cast_expression" => {
                    stack.extend(x.child_by_field_id(f.value));
                    continue;
                }
                _ => {}
            }
            let mut c = x.walk();
            stack.extend(x.children(&mut c));
        }
        false
    }

    /// Whether a loaded address is a read-only parameter (`read_only`), offset or not: `p`,
    /// `(p)`, `p + i`, `p - i`. Whether `p` and `i` are uniform is the caller's to check.
    fn read_only_base(&self, base: Node) -> bool {
        self.loaded_by_all(base.start_byte()) && based_on(base, &self.read_only, self.src)
    }

    /// Whether a load at byte `at` is made by every thread that is still running (`loads_by_all`).
    fn loaded_by_all(&self, at: usize) -> bool {
        match &self.loads_by_all {
            Some((first_return, loops)) => {
                at < *first_return && !loops.iter().any(|r| r.contains(&at))
            }
            None => true,
        }
    }

    /// Whether an address points into a read-only parameter: `&p[i]`, or a `read_only_base`.
    fn read_only_address(&self, a: Node) -> bool {
        let f = crate::lang::fields();
        let a = lang::strip_parens(a);
        let address_of = a.kind_id() == kinds().pointer_expression
            && a.child_by_field_id(f.operator)
                .is_some_and(|o| text(o, self.src) == "&");
        if !address_of {
            return self.read_only_base(a);
        }
        a.child_by_field_id(f.argument)
            .map(lang::strip_parens)
            .filter(|s| s.kind_id() == kinds().subscript_expression)
            .and_then(|s| s.child_by_field_id(f.argument))
            .is_some_and(|b| self.read_only_base(b))
    }

    /// Whether a name read in the body may have a value that differs between threads: it is
    /// thread-dependent, written so, a macro that expands to such a value, or a name the
    /// analysis cannot prove uniform.
    /// `at`: where the read is compiled (`branches`).
    fn name_varying(&self, name: &str, at: &Branches, depth: usize) -> bool {
        self.variable_varying(name, name, at, depth)
    }

    /// `name_varying` for a read of `name` that names the variable `key` (`scoped`: a
    /// variable of a loop's head is varying only by its own writes).
    fn variable_varying(&self, name: &str, key: &str, at: &Branches, depth: usize) -> bool {
        if depth > 16 || lang::THREAD_VARYING.contains(&name) || self.varying.contains(key, at) {
            return true;
        }
        match self.macros.get(name) {
            Some(m) if key == name => self.macro_varying(name, m, at, depth),
            _ => !self.value_uniform_as(name, key, at),
        }
    }

    /// A name (not a macro) whose reads are uniform unless it is written so.
    fn value_uniform(&self, name: &str, at: &Branches) -> bool {
        self.value_uniform_as(name, name, at)
    }

    /// `value_uniform` for the variable `key` that `name` names (`scoped`).
    fn value_uniform_as(&self, name: &str, key: &str, at: &Branches) -> bool {
        !self.varying.contains(key, at)
            && (self.known.contains(name)
                || lang::UNIFORM_BUILTINS.contains(&name)
                || lang::STANDARD_CONSTANTS.contains(&name))
    }

    /// Whether a macro of this file may expand to a value that differs between threads: it
    /// reads threadIdx, calls something, reads memory, names anything that is not uniform
    /// (a varying variable or macro, a name the file does not declare), or has several
    /// definitions (which one applies depends on the configuration).
    fn macro_varying(&self, name: &str, m: &MacroFacts, at: &Branches, depth: usize) -> bool {
        if m.thread_varying
            || m.redefined
            || m.calls
                .iter()
                .any(|c| !lang::UNEVALUATED_OPERATORS.contains(&c.as_str()))
            || reads_memory(&m.text)
        {
            return true;
        }
        macro_value_names(&m.text).into_iter().any(|i| {
            if i == name {
                // `#define x x`: the variable of that name.
                !self.value_uniform(i, at)
            } else {
                !lang::valueless_word(i) && self.name_varying(i, at, depth + 1)
            }
        })
    }

    /// Whether `name` is a function-like macro of this file whose expansion is a value computed
    /// from its arguments alone (`#define ceildiv(a, b) (((a) + (b) - 1) / (b))`): one
    /// definition, no thread-dependent name, no memory read, no write, calls of pure functions
    /// and such macros only, and every other name it reads uniform. Its call is then uniform
    /// where its arguments are (checked as the call's parts).
    fn pure_function_macro(&self, name: &str, at: &Branches, depth: usize) -> bool {
        let Some(m) = self.macros.get(name) else {
            return false;
        };
        let Some(params) = m.params.as_ref() else {
            return false;
        };
        if depth > 16 || m.thread_varying || m.redefined || reads_memory(&m.text) || writes(&m.text)
        {
            return false;
        }
        let calls_pure = m.calls.iter().all(|c| {
            lang::UNEVALUATED_OPERATORS.contains(&c.as_str())
                || lang::UNIFORM_FUNCTIONS.contains(&c.as_str())
                || lang::is_pure_function(c)
                || c != name && self.pure_function_macro(c, at, depth + 1)
        });
        calls_pure
            && macro_value_names(&m.text).into_iter().all(|i| {
                params.iter().any(|p| p == i)
                    || m.calls.iter().any(|c| c == i)
                    || lang::valueless_word(i)
                    || !self.name_varying(i, at, depth + 1)
            })
    }

    /// The names whose reads are uniform unless written otherwise: the kernel's parameters
    /// passed by value and template parameters, the body's locals and enumerators, and the
    /// file's constants and enumerators. A name the file also declares as something else
    /// (a `__device__` variable, say) counts only where it is certainly not that one: as a
    /// parameter, which hides it everywhere in the body.
    fn known_names(&self, file: &Declared, all: &[Node<'t>]) -> BTreeSet<String> {
        let k = kinds();
        let f = crate::lang::fields();
        let mut known: BTreeSet<String> = file.uniform.clone();
        for &n in all {
            let id = n.kind_id();
            if id == k.declaration || id == k.for_range_loop {
                let declarators: Vec<Node> = if id == k.declaration {
                    lang::declarators(n)
                } else {
                    n.child_by_field_id(f.declarator).into_iter().collect()
                };
                for d in declarators {
                    known.extend(declared_names(d, self.src));
                }
            } else if n.kind() == "enumerator" {
                known.extend(
                    n.child_by_field_id(f.name)
                        .map(|x| text(x, self.src).to_string()),
                );
            }
        }
        known.retain(|n| !file.other.contains(n));
        if let Some(function) = self.body.parent() {
            known.extend(parameters(function, self.src));
            if let Some(t) = function
                .parent()
                .filter(|t| t.kind_id() == k.template_declaration)
                .and_then(|t| t.child_by_field_id(f.parameters))
            {
                // Template parameters and their defaults are constants of the program.
                known.extend(identifiers(t, self.src));
            }
        }
        known
    }

    /// Whether `n` runs under control flow that may differ between threads, looking at the
    /// enclosing statements up to `stop` (exclusive) or the body.
    pub fn controlled(&self, n: Node, stop: Option<Node>) -> bool {
        let until = |a: Node| a.id() == self.body.id() || stop.is_some_and(|s| s.id() == a.id());
        let parent = |c: Node| self.parents.get(&c.id()).copied();
        guards(n, until, parent).into_iter().any(|g| match g {
            Guard::Condition(c) => self.expr_varying(c),
            Guard::Loop(l) => self.varying_loops.contains(&l.id()),
            Guard::Lambda => true,
        }) || self.after_varying_continue(n, stop)
    }

    /// Whether `n` follows, in a loop's body, a `continue` of that loop that some threads may
    /// take and others not (within `stop`, where given): the threads that take it skip `n` in
    /// that iteration. What comes before it, the loop's condition and its update run in every
    /// iteration all the same.
    fn after_varying_continue(&self, n: Node, stop: Option<Node>) -> bool {
        let f = crate::lang::fields();
        self.continues.iter().any(|&(jump, l)| {
            jump.end_byte() <= n.start_byte()
                && stop.is_none_or(|s| {
                    s.start_byte() <= l.start_byte() && l.end_byte() <= s.end_byte()
                })
                && l.child_by_field_id(f.body)
                    .is_some_and(|b| b.byte_range().contains(&n.start_byte()))
                && self.controlled(jump, Some(l))
        })
    }
}

/// The parent of every node under `root` (not of `root` itself), by node id, in one walk.
pub(super) fn parents_within(root: Node) -> HashMap<usize, Node> {
    let mut parents = HashMap::new();
    let mut stack = vec![root];
    while let Some(n) = stack.pop() {
        let mut c = n.walk();
        for child in n.children(&mut c) {
            parents.insert(child.id(), n);
            stack.push(child);
        }
    }
    parents
}

/// Where a write lands.
enum Written {
    /// The local `x` of `x`, `x.f`, `(x)`.
    Local(String),
    /// Memory: `a[i]`, `*p`, `p->f` (reading it back is a memory load, varying anyway).
    Memory,
    /// Anything else: a cast, a conditional, a call returning a reference.
    Unknown,
}

fn written_local(n: Node, src: &str) -> Written {
    let k = kinds();
    let f = crate::lang::fields();
    let mut x = n;
    loop {
        let id = x.kind_id();
        if id == k.identifier {
            return Written::Local(text(x, src).to_string());
        }
        if id == k.field_expression {
            let dot = x
                .child_by_field_id(f.operator)
                .is_some_and(|o| text(o, src) == ".");
            if !dot {
                return Written::Memory;
            }
            match x.child_by_field_id(f.argument) {
                Some(a) => x = a,
                None => return Written::Unknown,
            }
            continue;
        }
        if x.kind() == "parenthesized_expression" {
            match x.named_child(0) {
                Some(a) => x = a,
                None => return Written::Unknown,
            }
            continue;
        }
        if id == k.subscript_expression {
            return Written::Memory;
        }
        if id == k.pointer_expression
            && x.child_by_field_id(f.operator)
                .is_some_and(|o| text(o, src) == "*")
        {
            return Written::Memory;
        }
        return Written::Unknown;
    }
}

/// The operand of `&operand`, parentheses around either stripped.
fn address_operand<'t>(n: Node<'t>, src: &str) -> Option<Node<'t>> {
    let n = lang::strip_parens(n);
    (n.kind_id() == kinds().pointer_expression
        && n.child_by_field_id(crate::lang::fields().operator)
            .is_some_and(|o| text(o, src) == "&"))
    .then(|| n.child_by_field_id(crate::lang::fields().argument))
    .flatten()
    .map(lang::strip_parens)
}

/// Whether an argument may be an lvalue (and so bind to a non-const reference): literals,
/// arithmetic and comparisons yield temporaries.
fn is_lvalue_shape(n: Node) -> bool {
    !matches!(
        lang::strip_parens(n).kind(),
        "number_literal"
            | "string_literal"
            | "char_literal"
            | "true"
            | "false"
            | "nullptr"
            | "binary_expression"
            | "unary_expression"
            | "sizeof_expression"
            | "lambda_expression"
            | "call_expression"
    )
}

/// Whether a macro's replacement text may load memory: `a[i]`, `p->f`, `*p`.
fn reads_memory(t: &str) -> bool {
    if t.contains('[') || t.contains("->") {
        return true;
    }
    // A `*` after an operand multiplies; after nothing, `(` or an operator it dereferences.
    let b = t.as_bytes();
    b.iter().enumerate().any(|(i, &c)| {
        c == b'*'
            && !t[..i]
                .trim_end()
                .bytes()
                .last()
                .is_some_and(|p| p.is_ascii_alphanumeric() || p == b'_' || p == b')' || p == b']')
    })
}

/// Whether `name` is a function-like macro (one definition) whose expansion cannot write its
/// arguments: no assignment or step in its text, and no call but of pure functions and other
/// such macros (a call could take an argument by reference).
fn macro_writes_nothing(macros: &BTreeMap<String, MacroFacts>, name: &str, depth: usize) -> bool {
    let Some(m) = macros
        .get(name)
        .filter(|m| m.params.is_some() && !m.redefined)
    else {
        return false;
    };
    depth <= 16
        && !writes(&m.text)
        && m.calls.iter().all(|c| {
            lang::UNEVALUATED_OPERATORS.contains(&c.as_str())
                || lang::UNIFORM_FUNCTIONS.contains(&c.as_str())
                || lang::is_pure_function(c)
                || c != name && macro_writes_nothing(macros, c, depth + 1)
        })
}

/// Whether `name` is a function-like macro of one definition that writes nothing and stands for
/// one array element (`#define sA(i, j) sA[(j)*lda + (i)]`): its arguments are indices, only
/// read, and assigning it or taking its address is the element's.
fn element_macro(macros: &BTreeMap<String, MacroFacts>, name: &str) -> bool {
    macro_writes_nothing(macros, name, 0)
        && macros.get(name).is_some_and(|m| subscript_text(&m.text))
}

/// Whether a replacement text is one element of an array or pointer: a name and one or more
/// bracketed subscripts (`sAB[(j)*sldab + (i)]`, `A[i][j]`), in parentheses or not.
fn subscript_text(t: &str) -> bool {
    let mut t = t.trim();
    while t.starts_with('(') && t.ends_with(')') && balanced_group(t, b'(', b')') == Some(t.len()) {
        t = t[1..t.len() - 1].trim();
    }
    let Some(name) = crate::lang::leading_identifier(t) else {
        return false;
    };
    let mut rest = t[name.len()..].trim_start();
    if rest.is_empty() {
        return false;
    }
    while !rest.is_empty() {
        match balanced_group(rest, b'[', b']') {
            Some(end) => rest = rest[end..].trim_start(),
            None => return false,
        }
    }
    true
}

/// Where the group that opens `t` (with `open`) closes, one past its closing byte; None when
/// `t` does not open with it or it never closes.
fn balanced_group(t: &str, open: u8, close: u8) -> Option<usize> {
    let b = t.as_bytes();
    if b.first() != Some(&open) {
        return None;
    }
    let mut depth = 0usize;
    for (i, &c) in b.iter().enumerate() {
        if c == open {
            depth += 1;
        } else if c == close {
            depth -= 1;
            if depth == 0 {
                return Some(i + 1);
            }
        }
    }
    None
}

/// Whether a macro's replacement text assigns or steps a variable (`=`, `+=`, `++`, ...).
fn writes(t: &str) -> bool {
    if t.contains("++") || t.contains("--") {
        return true;
    }
    let b = t.as_bytes();
    b.iter().enumerate().any(|(i, &c)| {
        c == b'='
            && b.get(i + 1) != Some(&b'=')
            && !(i > 0 && matches!(b[i - 1], b'=' | b'!' | b'<' | b'>') && !shift_assign(b, i))
    })
}

/// Whether the `=` at `i` ends `<<=` or `>>=` (an assignment, not a comparison).
fn shift_assign(b: &[u8], i: usize) -> bool {
    i >= 2 && matches!(&b[i - 2..i], b"<<" | b">>")
}

/// Every identifier in `n`.
fn identifiers(n: Node, src: &str) -> Vec<String> {
    let id = kinds().identifier;
    let mut out = Vec::new();
    lang::visit(n, |x| {
        if x.kind_id() == id {
            out.push(text(x, src).to_string());
        }
        true
    });
    out
}

/// The variables the `for` loops among `all` declare in their heads, with each loop's range
/// (`Uniformity::loop_scoped`).
fn loop_scoped_variables(all: &[Node], src: &str) -> HashMap<String, Vec<std::ops::Range<usize>>> {
    let k = kinds();
    let f = crate::lang::fields();
    let mut out: HashMap<String, Vec<std::ops::Range<usize>>> = HashMap::new();
    for l in all {
        let declarators: Vec<Node> = if l.kind_id() == k.for_statement {
            let Some(init) = l.child_by_field_id(f.initializer) else {
                continue;
            };
            if init.kind_id() != k.declaration {
                continue;
            }
            lang::declarators(init)
                .into_iter()
                .chain({
                    let mut c = init.walk();
                    init.named_children(&mut c)
                        .filter(|d| d.kind_id() == k.init_declarator)
                        .filter_map(|d| d.child_by_field_id(f.declarator))
                        .collect::<Vec<_>>()
                })
                .collect()
        } else if l.kind_id() == k.for_range_loop {
            l.child_by_field_id(f.declarator).into_iter().collect()
        } else {
            continue;
        };
        for d in declarators {
            for name in declared_names(d, src) {
                out.entry(name).or_default().push(l.byte_range());
            }
        }
    }
    out
}

/// The names a declarator declares: one, or several for a structured binding.
fn declared_names(declarator: Node, src: &str) -> Vec<String> {
    let k = kinds();
    let mut binding = None;
    lang::visit(declarator, |x| {
        if x.kind_id() == k.structured_binding_declarator {
            binding = Some(x);
        }
        binding.is_none()
    });
    match binding {
        Some(b) => identifiers(b, src),
        None => lang::declarator_name(declarator)
            .map(|n| vec![text(n, src).to_string()])
            .unwrap_or_default(),
    }
}

fn contains_kind(n: Node, kind: u16) -> bool {
    let mut found = false;
    lang::visit(n, |x| {
        found |= x.kind_id() == kind;
        !found
    });
    found
}

/// The value names in a macro's replacement text: identifiers that are no field (`.x`, `->x`),
/// no scope (`ns::`), not inside `sizeof(...)`, a string or a character literal.
fn macro_value_names(t: &str) -> Vec<&str> {
    let b = t.as_bytes();
    let mut out = Vec::new();
    let mut i = 0;
    while i < b.len() {
        let c = b[i];
        if c == b'"' || c == b'\'' {
            i += 1;
            while i < b.len() && b[i] != c {
                i += if b[i] == b'\\' { 2 } else { 1 };
            }
            i += 1;
        } else if c.is_ascii_digit() {
            while i < b.len() && (b[i].is_ascii_alphanumeric() || b[i] == b'_' || b[i] == b'.') {
                i += 1;
            }
        } else if c.is_ascii_alphabetic() || c == b'_' {
            let start = i;
            while i < b.len() && (b[i].is_ascii_alphanumeric() || b[i] == b'_') {
                i += 1;
            }
            let word = &t[start..i];
            let before = t[..start].trim_end();
            let after = t[i..].trim_start();
            if lang::UNEVALUATED_OPERATORS.contains(&word) && after.starts_with('(') {
                // Skip the parenthesized operand.
                let mut depth = 0usize;
                let mut j = t.len() - after.len();
                while j < b.len() {
                    match b[j] {
                        b'(' => depth += 1,
                        b')' => {
                            depth -= 1;
                            if depth == 0 {
                                break;
                            }
                        }
                        _ => {}
                    }
                    j += 1;
                }
                i = j + 1;
            } else if !(before.ends_with('.') || before.ends_with("->") || after.starts_with("::"))
            {
                out.push(word);
            }
        } else {
            i += 1;
        }
    }
    out
}

/// The function a call names without a scope: `f` of `f(...)` or `f<T>(...)`; none for `ns::f`,
/// `x.f`, `(*p)`.
fn unqualified_callee<'s>(callee: Node, src: &'s str) -> Option<&'s str> {
    match callee.kind() {
        "identifier" => Some(text(callee, src)),
        "template_function" => callee
            .child_by_field_id(crate::lang::fields().name)
            .map(|n| text(n, src)),
        _ => None,
    }
}

mod broadcast;
mod helpers;
mod varying;
use varying::{Branches, Varying};
/// Names declared outside function bodies, by whether every thread of every block reads the
/// same value from them.
mod names;
use names::*;

#[cfg(test)]
mod tests;
