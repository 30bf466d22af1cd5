//! Calls between the file's device functions, by name: which helpers need the task context
//! (they read blockIdx/gridDim, maybe through other helpers) and which synchronize the block.
//! Calls are matched by name because calls are rewritten by name: every overload of a name that
//! needs the context gets it. Calls of members are the exception: they pass the context only
//! where the text says which class they call (`called_class`), since a member's name may stand
//! for another class's member, or a free function, at other call sites.

use super::body::BodyFacts;
use super::sites::FunctionSite;
use super::HelperPlan;
use std::collections::{BTreeMap, BTreeSet};
use tree_sitter::Node;

pub struct CallGraph {
    /// Helpers by name: indices into the analysis' helper list.
    pub by_name: BTreeMap<String, Vec<usize>>,
    /// Names of helpers that take the task context.
    pub ctx_names: BTreeSet<String>,
    /// Those of them that name a function other than a member (of this file, or of an
    /// included file): calls by these names pass the context by name alone.
    pub free_ctx_names: BTreeSet<String>,
    /// Names of helpers that synchronize the block, directly or through other helpers.
    pub barrier_names: BTreeSet<String>,
    /// Names of helpers that synchronize a warp's lanes by a fixed mask (`BodyFacts::
    /// warp_syncs`), directly or through other helpers: `warpReduceSum` and the like.
    pub warp_sync_names: BTreeSet<String>,
    /// Helpers by the class or namespace that defines them and their name (`owner`): a
    /// qualified call `X::f` where X defines its own `f` here calls one of those, and no other
    /// `f` (`calls_barrier`, `calls_warp_sync`).
    pub owned: BTreeMap<(String, String), Vec<usize>>,
    /// The same for other files' functions (`KnownHelper::owner`): whether any of X's `f`
    /// synchronizes the block, and whether any synchronizes a warp. Used where X defines no
    /// `f` here.
    pub external_owned: BTreeMap<(String, String), (bool, bool)>,
    /// Names that a call through an object (`x.f()`, `p->f()`) may reach a function that
    /// synchronizes the block by: the file's members that do, and other files' functions
    /// that do (of whatever class: the object's type is not followed).
    pub member_barrier_names: BTreeSet<String>,
    /// The same for functions that synchronize a warp's lanes.
    pub member_warp_sync_names: BTreeSet<String>,
    /// Names of member functions that read blockIdx/gridDim, maybe through others (`operator()`
    /// for a functor's): called through an object, they cannot be given the task context.
    pub member_ctx: BTreeSet<String>,
    /// Names of the file's member functions (a call `x.f()` of another name may be a call of a
    /// functor held in a field `f`).
    pub member_names: BTreeSet<String>,
    /// Members that take the task context (`FunctionSite::context_member`), by name: the
    /// classes that define one so. A call of such a member passes the context where the class
    /// it calls is certain (`passes_ctx`); elsewhere the kernel is refused.
    pub ctx_members: CtxMembers,
    /// The file's type aliases and classes' fields (`called_class`).
    pub classes: super::classes::Classes,
    /// Names of helpers that take the task context and whose address the file takes (the name
    /// stands other than as a callee: `Index f = gid;`, `{gid}`, `&gid`): a call through a
    /// function pointer may reach them and cannot pass the context (`address_taken`).
    pub address_taken: BTreeSet<String>,
    /// The file takes the address of a helper that synchronizes the block, or of one that
    /// synchronizes a warp (`address_taken` of `barrier_names`, `warp_sync_names`): a call
    /// through a pointer (a local or parameter called by name, `(&f)(x)`) may reach it.
    pub pointer_syncs: (bool, bool),
    /// Names of the variables declared at namespace scope (`__device__ int (*pick)() = f;`):
    /// a call of one by name is a call through a function pointer (`file_variables`).
    pub file_variables: BTreeSet<String>,
    /// Classes whose objects read blockIdx/gridDim in code that runs without a call by name
    /// (`implicit_block_readers`); where functors take the context (`functors_take_ctx`), not
    /// those that read it only in their function-call operator.
    pub implicit_readers: BTreeSet<String>,
    /// Names whose use reads blockIdx/gridDim: the file's macros (and its includes') that read
    /// them, maybe through others, and the helpers that do (`ctx_names`).
    pub block_names: BTreeSet<String>,
    /// Some functor's `operator()` reads blockIdx/gridDim, and every one that does takes the
    /// task context (`FunctionSite::context_member`, here and in the files the analysis knows):
    /// a call of a local or parameter by name (`f(x)`, of a class the text may not tell, such as
    /// a template parameter) passes the context through `cupreempt::call_functor`, which calls
    /// the context form where the class has one (`functor_calls`).
    pub functors_take_ctx: bool,
}

impl CallGraph {
    /// Builds the graph and marks the helpers that need the task context. `external_barriers`:
    /// functions of included files that synchronize the block (`Options::known_helpers`); a
    /// call to one is a barrier like a call to a helper of this file that synchronizes.
    /// `external_warp_syncs`: those that synchronize the lanes of a warp by a fixed mask.
    /// `external_ctx`: functions of included files that take the task context
    /// (`KnownHelper::with_ctx`); a helper here that calls one needs the context too. `forced`:
    /// helpers that need it for calls the graph does not follow by name (functor calls, once
    /// functors take the context: `functor_helpers`).
    #[allow(clippy::too_many_arguments)]
    pub fn build(
        helpers: &mut [HelperPlan],
        external_barriers: &[&str],
        external_warp_syncs: &[&str],
        external_owned: BTreeMap<(String, String), (bool, bool)>,
        external_ctx: &[&str],
        forced: &BTreeSet<String>,
        pointers: (bool, bool),
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
                    || forced.contains(&h.site.name)
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
        // Members that need the context: their calls through objects may now be followed.
        let member_ctx: BTreeSet<String> = helpers
            .iter()
            .filter(|h| h.site.member && h.needs_ctx)
            .map(|h| h.site.name.clone())
            .collect();
        let mut owned: BTreeMap<(String, String), Vec<usize>> = BTreeMap::new();
        for (i, h) in helpers.iter().enumerate() {
            if let Some(o) = owner(&h.site) {
                owned
                    .entry((o.to_string(), h.site.name.clone()))
                    .or_default()
                    .push(i);
            }
        }
        let external_barriers = external(external_barriers, helpers);
        let resolve = Resolve {
            owned: &owned,
            external_owned: &external_owned,
        };
        // `pointers`: the file takes the address of a helper that synchronizes the block, or a
        // warp (`pointer_syncs`): a call through a function pointer may reach it.
        let syncing = calling_closure(helpers, &external_barriers, resolve, false, |h| {
            !h.facts.barriers.is_empty() || (pointers.0 && calls_through_pointer(h))
        });
        let external_warp_syncs = external(external_warp_syncs, helpers);
        let warp_syncing = calling_closure(helpers, &external_warp_syncs, resolve, true, |h| {
            !h.facts.warp_syncs.is_empty() || (pointers.1 && calls_through_pointer(h))
        });
        let mut member_barrier_names = external_barriers.clone();
        let mut member_warp_sync_names = external_warp_syncs.clone();
        let mut barrier_names = external_barriers;
        let mut warp_sync_names = external_warp_syncs;
        for ((h, s), w) in helpers.iter_mut().zip(syncing).zip(warp_syncing) {
            h.synchronizes = s;
            h.synchronizes_warp = w;
            if s {
                barrier_names.insert(h.site.name.clone());
                if h.site.member {
                    member_barrier_names.insert(h.site.name.clone());
                }
            }
            if w {
                warp_sync_names.insert(h.site.name.clone());
                if h.site.member {
                    member_warp_sync_names.insert(h.site.name.clone());
                }
            }
        }
        let mut by_name: BTreeMap<String, Vec<usize>> = BTreeMap::new();
        for (i, h) in helpers.iter().enumerate() {
            by_name.entry(h.site.name.clone()).or_default().push(i);
        }
        let member_names = helpers
            .iter()
            .filter(|h| h.site.member)
            .map(|h| h.site.name.clone())
            .collect();
        let mut ctx_members = CtxMembers::new();
        for h in helpers
            .iter()
            .filter(|h| h.needs_ctx && h.site.context_member())
        {
            if let Some(class) = &h.site.class {
                ctx_members
                    .entry(h.site.name.clone())
                    .or_default()
                    .insert(class.clone());
            }
        }
        // A member that needs the context but cannot take it leaves its name unresolvable in
        // its class: every call that may reach it is refused.
        for h in helpers
            .iter()
            .filter(|h| h.needs_ctx && h.site.member && !h.site.context_member())
        {
            if let (Some(classes), Some(class)) = (ctx_members.get_mut(&h.site.name), &h.site.class)
            {
                classes.remove(class);
            }
        }
        let free_ctx_names = ctx_names
            .iter()
            .filter(|n| {
                by_name
                    .get(*n)
                    .is_none_or(|is| is.iter().any(|&i| !helpers[i].site.member))
            })
            .cloned()
            .collect();
        CallGraph {
            free_ctx_names,
            by_name,
            ctx_names,
            barrier_names,
            warp_sync_names,
            owned,
            external_owned,
            member_barrier_names,
            member_warp_sync_names,
            member_ctx,
            member_names,
            ctx_members,
            classes: Default::default(),
            address_taken: BTreeSet::new(),
            pointer_syncs: (false, false),
            file_variables: BTreeSet::new(),
            implicit_readers: BTreeSet::new(),
            block_names: BTreeSet::new(),
            functors_take_ctx: false,
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
        !self.unresolved_member_calls(f, &h.site, src).is_empty()
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
            for name in self.called_names(&helpers[i].facts) {
                for j in self.callees(name) {
                    if seen.insert(j) {
                        todo.push(j);
                    }
                }
            }
        }
        false
    }

    /// The names a body calls: by name, and members that need the context through objects
    /// (where the kernel is transformed, those calls are certain, `passes_ctx`).
    fn called_names<'f>(&'f self, facts: &'f BodyFacts) -> impl Iterator<Item = &'f str> + 'f {
        let members = facts
            .member_calls
            .iter()
            .map(|(m, _)| m.as_str())
            .filter(|m| self.member_ctx.contains(*m));
        let functors = facts
            .ctx_member_calls
            .iter()
            .map(|(m, _)| m.as_str())
            .filter(|m| *m == FUNCTOR_CALL);
        facts
            .calls
            .iter()
            .map(|c| c.name.as_str())
            .chain(members)
            .chain(functors)
    }

    /// The calls in a body of members that need the task context where the class called is
    /// certain and its member takes the context (`passes_ctx`): by name (`Foo::f()`, `f()` in a
    /// member of `Foo`) and through objects (`x.f()`). The rewrite passes the context there.
    pub fn ctx_member_calls<'t>(
        &self,
        facts: &BodyFacts<'t>,
        site: &FunctionSite,
        src: &str,
    ) -> Vec<(String, Node<'t>)> {
        self.member_calls_of(facts)
            .filter(|(m, call)| passes_ctx(self, m, *call, site, facts, src))
            .map(|(m, call)| (m.to_string(), call))
            .chain(
                self.functor_calls(facts, site)
                    .map(|call| (FUNCTOR_CALL.to_string(), call)),
            )
            .collect()
    }

    /// Calls of a local or parameter by name (`f(x)`: an object's `operator()`, or a function
    /// pointer's call) and of an expression, where functors take the context
    /// (`functors_take_ctx`). The rewrite makes them `cupreempt::call_functor(__cp, f, x)`.
    fn functor_calls<'f, 't>(
        &'f self,
        facts: &'f BodyFacts<'t>,
        site: &'f FunctionSite,
    ) -> impl Iterator<Item = Node<'t>> + 'f {
        let objects = facts
            .calls
            .iter()
            .filter(move |c| {
                names_local(facts, site, &c.name)
                    && c.node
                        .child_by_field_id(crate::lang::fields().function)
                        .is_some_and(|f| f.kind_id() == crate::lang::kinds().identifier)
            })
            .map(|c| c.node);
        // And calls of an expression (`Scale{2.0f}(x)`, `ops[i](x)`, `(*fp)(x)`).
        let expressions = facts.indirect_calls.iter().copied();
        // Not a call with a braced list among its arguments (`layout()({row, col})`, as
        // CUTLASS's epilogues index a tensor): `call_functor`'s forwarded arguments cannot be
        // deduced from one, and the output did not compile. Such a call is refused where
        // functors take the context (`decide`: its `operator()` cannot be passed it).
        objects
            .chain(expressions)
            .filter(|&call| !braced_argument(call))
            .filter(move |_| self.functors_take_ctx)
    }

    /// Helpers that do not take the task context and call a functor (`functor_calls`), where
    /// functors take it: they must, to pass it on.
    pub fn functor_helpers(&self, helpers: &[HelperPlan]) -> BTreeSet<String> {
        helpers
            .iter()
            .filter(|h| !h.needs_ctx && self.functor_calls(&h.facts, &h.site).next().is_some())
            .map(|h| h.site.name.clone())
            .collect()
    }

    /// The calls in a body of members that need the task context: by name where the name is
    /// only a member's (`member_only_ctx`), and through objects.
    fn member_calls_of<'f, 't>(
        &'f self,
        facts: &'f BodyFacts<'t>,
    ) -> impl Iterator<Item = (&'f str, Node<'t>)> + 'f {
        let by_name = facts
            .calls
            .iter()
            .filter(|c| self.member_only_ctx(&c.name))
            .map(|c| (c.name.as_str(), c.node));
        let through_objects = facts.member_calls.iter().map(|(m, c)| (m.as_str(), *c));
        by_name
            .chain(through_objects)
            .filter(|(m, _)| self.member_ctx.contains(*m))
    }

    /// The calls in a body of members that need the task context where it cannot be passed:
    /// the class called is not certain (`called_class`), or its member cannot take the context.
    /// A kernel that reaches one is refused.
    pub fn unresolved_member_calls<'f, 't>(
        &'f self,
        facts: &'f BodyFacts<'t>,
        site: &FunctionSite,
        src: &str,
    ) -> Vec<(&'f str, Node<'t>)> {
        self.member_calls_of(facts)
            .filter(|(m, call)| !passes_ctx(self, m, *call, site, facts, src))
            .collect()
    }

    /// A name that needs the task context only as a member's: its calls by name are rewritten
    /// only where they certainly call that member (`ctx_member_calls`).
    pub fn member_only_ctx(&self, name: &str) -> bool {
        self.member_ctx.contains(name) && !self.free_ctx_names.contains(name)
    }

    /// The file's helpers that a body with these facts calls, directly or through others.
    pub fn reachable(&self, facts: &BodyFacts, helpers: &[HelperPlan]) -> BTreeSet<usize> {
        let mut seen = BTreeSet::new();
        let mut calls: Vec<&str> = self.called_names(facts).collect();
        while let Some(name) = calls.pop() {
            for i in self.callees(name) {
                if seen.insert(i) {
                    calls.extend(self.called_names(&helpers[i].facts));
                }
            }
        }
        seen
    }
}

/// Whether helper `h` calls through a function pointer: a call of an expression
/// (`(*f)(x)`, `table[i](x)`) or of a local or parameter by name (`f(x)`, where `f` is a
/// pointer, a functor or a lambda).
pub fn calls_through_pointer(h: &HelperPlan) -> bool {
    !h.facts.indirect_calls.is_empty()
        || h.facts
            .calls
            .iter()
            .any(|c| names_local(&h.facts, &h.site, &c.name))
}

/// Whether `name` is a variable or parameter of the body: a call of it by name calls an
/// object's `operator()` or a function pointer.
pub fn names_local(facts: &BodyFacts, site: &FunctionSite, name: &str) -> bool {
    facts.declared.contains(name) || site.param_list.iter().any(|p| p.name == name)
}

/// The member a functor call reaches (`CallGraph::functor_calls`).
pub const FUNCTOR_CALL: &str = "operator()";

/// Member names, each with the classes whose member of that name takes the task context.
pub type CtxMembers = BTreeMap<String, BTreeSet<String>>;

/// The class whose member a call names, where the text leaves no doubt: `this->f()`, and `f()`
/// unqualified in a member (the caller's own class, whose scope is searched first); `x.f()` and
/// `p->f()` for a local or parameter declared with a class type (`Foo<8> x`, `Foo* p`) or, in a
/// member, a field of its class declared so (`local.f()`, `this->local.f()`); `Foo::f()` and
/// `ns::Foo<T>::f()`. Type aliases are followed (`classes`). None for any other object (an
/// element, a call's result) and for an unqualified call outside a member.
pub fn called_class(
    call: Node,
    caller: &FunctionSite,
    facts: &BodyFacts,
    src: &str,
    classes: &super::classes::Classes,
) -> Option<String> {
    let class = written_class(call, caller, facts, src, classes)?;
    classes.resolve(&class)
}

/// The class's name as the text gives it (an alias not followed): `called_class`'s cases.
fn written_class(
    call: Node,
    caller: &FunctionSite,
    facts: &BodyFacts,
    src: &str,
    classes: &super::classes::Classes,
) -> Option<String> {
    let k = crate::lang::kinds();
    let f = crate::lang::fields();
    let callee = call.child_by_field_id(f.function)?;
    if callee.kind_id() == k.field_expression {
        let object = callee.child_by_field_id(f.argument)?;
        if object.kind() == "this" {
            return caller.class.clone();
        }
        // `this->local.f()`: a field of the caller's class.
        if object.kind_id() == k.field_expression {
            let of_this = object
                .child_by_field_id(f.argument)
                .is_some_and(|a| a.kind() == "this");
            let field = object.child_by_field_id(f.field)?;
            return match (of_this, &caller.class) {
                (true, Some(class)) => classes.field_class(class, crate::lang::text(field, src)),
                _ => None,
            };
        }
        if object.kind_id() != k.identifier {
            return None;
        }
        return object_class(crate::lang::text(object, src), caller, facts, src, classes);
    }
    if callee.kind_id() == k.qualified_identifier {
        // `ns::Foo<T>::f`: the innermost qualifier names the class.
        let mut q = callee;
        while let Some(inner) = q
            .child_by_field_id(f.name)
            .filter(|n| n.kind_id() == k.qualified_identifier)
        {
            q = inner;
        }
        let scope = q.child_by_field_id(f.scope)?;
        return match crate::lang::class_name_of_type(scope, src) {
            Some(class) => Some(class.to_string()),
            None if scope.kind() == "namespace_identifier" => {
                Some(crate::lang::text(scope, src).to_string())
            }
            None => None,
        };
    }
    if callee.kind_id() == k.identifier || callee.kind_id() == k.template_function {
        // A functor called by the name of a local or parameter (`divmod(q, r, x)` of a
        // `lib::FastDivmod divmod` parameter): its class's `operator()`. Without it, any class's
        // `operator()` that synchronizes counted for every such call (a template library's
        // kernels refused, CP004, for a division helper's call).
        let name = crate::lang::text(callee, src);
        let object = (callee.kind_id() == k.identifier)
            .then(|| object_class(name, caller, facts, src, classes))
            .flatten();
        return object.or_else(|| caller.class.clone());
    }
    None
}

/// Whether a call passes a braced list as an argument (`f({1, 2})`).
fn braced_argument(call: Node) -> bool {
    let k = crate::lang::kinds();
    call.child_by_field_id(crate::lang::fields().arguments)
        .is_some_and(|args| {
            let mut c = args.walk();
            let braced = args
                .named_children(&mut c)
                .any(|a| a.kind_id() == k.initializer_list);
            braced
        })
}

/// The class of the object that `name` names in `caller`: a local's declared class, a
/// parameter's type, or in a member a field of its class. None for a local of another type or
/// a name that none of these declares.
fn object_class(
    name: &str,
    caller: &FunctionSite,
    facts: &BodyFacts,
    src: &str,
    classes: &super::classes::Classes,
) -> Option<String> {
    let f = crate::lang::fields();
    if let Some(class) = facts.declared_classes.get(name) {
        return Some(class.clone());
    }
    if facts.declared.contains(name) {
        return None;
    }
    let mut c = caller.params.walk();
    let mut params = caller.params.named_children(&mut c);
    let param = params.find(|p| {
        p.child_by_field_id(f.declarator)
            .and_then(crate::lang::declarator_name)
            .is_some_and(|n| crate::lang::text(n, src) == name)
    });
    match (param, &caller.class) {
        (Some(p), _) => p
            .child_by_field_id(f.r#type)
            .and_then(|t| crate::lang::class_name_of_type(t, src))
            .map(str::to_string),
        // Neither a local nor a parameter: in a member, a field of its class.
        (None, Some(class)) => classes.field_class(class, name),
        (None, None) => None,
    }
}

/// Whether a call of member `name` certainly calls a member that takes the task context
/// (`called_class`).
pub fn passes_ctx(
    graph: &CallGraph,
    name: &str,
    call: Node,
    caller: &FunctionSite,
    facts: &BodyFacts,
    src: &str,
) -> bool {
    graph.ctx_members.get(name).is_some_and(|members| {
        called_class(call, caller, facts, src, &graph.classes).is_some_and(|c| members.contains(&c))
    })
}

/// `names` and the names of the helpers whose own body satisfies `direct` or that call one of
/// those (by name, or a member named in `members` through an object), to a fixed point: the
/// helpers that synchronize, directly or through others.
fn calling_closure(
    helpers: &[HelperPlan],
    external: &BTreeSet<String>,
    resolve: Resolve,
    warp: bool,
    direct: impl Fn(&HelperPlan) -> bool,
) -> Vec<bool> {
    let mut marked: Vec<bool> = helpers.iter().map(&direct).collect();
    loop {
        let mut changed = false;
        for i in 0..helpers.len() {
            if marked[i] {
                continue;
            }
            let by_name = |name: &str| {
                external.contains(name)
                    || helpers
                        .iter()
                        .zip(&marked)
                        .any(|(h, &m)| m && h.site.name == name)
            };
            let facts = &helpers[i].facts;
            // A call through an object may reach any member of that name (its class is not
            // followed), or another file's function of that name; a call of a local or
            // parameter by name, any function-call operator.
            let member = |m: &str| {
                external.contains(m)
                    || helpers
                        .iter()
                        .zip(&marked)
                        .any(|(h, &mk)| mk && h.site.member && h.site.name == m)
            };
            let site = &helpers[i].site;
            let calls_member = facts.member_calls.iter().any(|(m, _)| member(m))
                || facts
                    .calls
                    .iter()
                    .any(|c| names_local(facts, site, &c.name) && member(FUNCTOR_CALL));
            // A macro's text calls by name (`#define REDUCE(s, v) block_sum(s, v)`).
            let calls_in_macro = facts
                .macro_uses
                .iter()
                .any(|m| m.facts.calls.iter().any(|c| by_name(c)));
            let calls = facts.calls.iter().any(|c| match resolve.call(c) {
                Callee::Here(is) => is.iter().any(|&j| marked[j]),
                Callee::Elsewhere(block, lanes) => {
                    if warp {
                        lanes
                    } else {
                        block
                    }
                }
                Callee::ByName => by_name(&c.name),
            });
            if calls_member || calls || calls_in_macro {
                marked[i] = true;
                changed = true;
            }
        }
        if !changed {
            return marked;
        }
    }
}

/// Whose function a helper is, for qualified calls: the class it is defined in, else its
/// innermost namespace.
pub fn owner<'a>(site: &'a FunctionSite) -> Option<&'a str> {
    site.class
        .as_deref()
        .or(site.scope.last().map(String::as_str))
}

/// Where a qualified call `X::f` leads when X defines its own `f`: name lookup in X finds
/// those and stops there, so another class's `f` that synchronizes is not reached.
#[derive(Clone, Copy)]
struct Resolve<'m> {
    owned: &'m BTreeMap<(String, String), Vec<usize>>,
    external_owned: &'m BTreeMap<(String, String), (bool, bool)>,
}

enum Callee<'m> {
    /// X's own `f`s of this file.
    Here(&'m [usize]),
    /// X's own `f`s are another file's: whether one synchronizes the block, and a warp.
    Elsewhere(bool, bool),
    /// Unqualified, or X defines no `f` the analysis knows (a base class's, a namespace's of
    /// a file it does not read): whatever the name reaches.
    ByName,
}

impl<'m> Resolve<'m> {
    fn call(&self, c: &super::body::Call) -> Callee<'m> {
        let Some(q) = c.qualifier.as_ref() else {
            return Callee::ByName;
        };
        let key = (q.clone(), c.name.clone());
        if let Some(is) = self.owned.get(&key) {
            return Callee::Here(is);
        }
        match self.external_owned.get(&key) {
            Some(&(block, lanes)) => Callee::Elsewhere(block, lanes),
            None => Callee::ByName,
        }
    }
}

impl CallGraph {
    fn resolve(&self) -> Resolve<'_> {
        Resolve {
            owned: &self.owned,
            external_owned: &self.external_owned,
        }
    }

    /// Whether call `c` may reach a helper that synchronizes the block, and one that
    /// synchronizes a warp's lanes (a qualified call only its owner's: `Resolve`), or another
    /// file's function that does.
    pub fn call_syncs(&self, c: &super::body::Call, helpers: &[HelperPlan]) -> (bool, bool) {
        match self.resolve().call(c) {
            Callee::Here(is) => (
                is.iter().any(|&i| helpers[i].synchronizes),
                is.iter().any(|&i| helpers[i].synchronizes_warp),
            ),
            Callee::Elsewhere(block, lanes) => (block, lanes),
            Callee::ByName => (
                self.barrier_names.contains(&c.name),
                self.warp_sync_names.contains(&c.name),
            ),
        }
    }

    /// Whether call `c` may synchronize the block (`call_syncs`).
    pub fn calls_barrier(&self, c: &super::body::Call, helpers: &[HelperPlan]) -> bool {
        self.call_syncs(c, helpers).0
    }

    /// Whether a call through an object, `x.m(...)` made in `caller`, may reach a member that
    /// synchronizes the block, and one that synchronizes a warp: those of the object's class
    /// where the text tells it (`called_class`) and the class defines its own `m`, else any
    /// member of that name (`member_barrier_names`).
    pub fn member_call_syncs(
        &self,
        call: Node,
        m: &str,
        caller: &FunctionSite,
        facts: &BodyFacts,
        src: &str,
        helpers: &[HelperPlan],
    ) -> (bool, bool) {
        if let Some(class) = called_class(call, caller, facts, src, &self.classes) {
            let key = (class, m.to_string());
            if let Some(is) = self.owned.get(&key) {
                return (
                    is.iter().any(|&i| helpers[i].synchronizes),
                    is.iter().any(|&i| helpers[i].synchronizes_warp),
                );
            }
            if let Some(&flags) = self.external_owned.get(&key) {
                return flags;
            }
        }
        (
            self.member_barrier_names.contains(m),
            self.member_warp_sync_names.contains(m),
        )
    }

    /// The body's calls that may synchronize the block or a warp and that no live copy can
    /// stand in for, each with its name and whether it may do either: a local lambda's
    /// (`lambda_syncs`), a functor's or function pointer's called by name (a local or
    /// parameter), a call through an object (`member_call_syncs`), a macro whose text calls a
    /// helper that does, and a call of an expression (`(&stage)(s, v)`) where the file takes
    /// such a helper's address (`pointer_syncs`). Only those that may.
    pub fn hidden_syncs<'t, 's>(
        &self,
        facts: &'s BodyFacts<'t>,
        caller: &FunctionSite,
        src: &'s str,
        helpers: &[HelperPlan],
    ) -> Vec<(&'s str, Node<'t>, bool, bool)> {
        let lambdas = lambda_syncs(facts, self, helpers, src);
        let (pointer_block, pointer_lanes) = self.pointer_syncs;
        let by_local_name = facts.calls.iter().filter_map(|c| {
            let flags = match lambdas.get(c.name.as_str()) {
                Some(&flags) => flags,
                None if names_local(facts, caller, &c.name) => {
                    let (block, lanes) =
                        self.member_call_syncs(c.node, FUNCTOR_CALL, caller, facts, src, helpers);
                    (block || pointer_block, lanes || pointer_lanes)
                }
                None => return None,
            };
            Some((c.name.as_str(), c.node, flags))
        });
        // Calls through objects, and the calls by name that pass the context to a member.
        let mut seen = BTreeSet::new();
        let through_objects = facts
            .member_calls
            .iter()
            .chain(&facts.ctx_member_calls)
            .filter(|(_, n)| seen.insert(n.id()))
            .map(|(m, n)| {
                let flags = self.member_call_syncs(*n, m, caller, facts, src, helpers);
                (m.as_str(), *n, flags)
            });
        let macros = facts.macro_uses.iter().map(|m| {
            let named = |names: &BTreeSet<String>| m.facts.calls.iter().any(|c| names.contains(c));
            let flags = (named(&self.barrier_names), named(&self.warp_sync_names));
            (m.name.as_str(), m.node, flags)
        });
        let expressions = facts
            .indirect_calls
            .iter()
            .map(|&n| ("a function pointer", n, self.pointer_syncs));
        by_local_name
            .chain(through_objects)
            .chain(macros)
            .chain(expressions)
            .filter(|(_, _, (block, lanes))| *block || *lanes)
            .map(|(name, n, (block, lanes))| (name, n, block, lanes))
            .collect()
    }

    /// Whether call `c` may synchronize a warp's lanes (`call_syncs`).
    pub fn calls_warp_sync(&self, c: &super::body::Call, helpers: &[HelperPlan]) -> bool {
        self.call_syncs(c, helpers).1
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
///
/// `call_operator`: whether a function-call operator that reads the block index counts. It
/// runs only where the text calls the object (`f(x)`, `T{}(x)`), and where every functor takes
/// the context those calls pass it (`CallGraph::functors_take_ctx`, `functor_calls`).
pub fn implicit_block_readers(
    root: Node,
    src: &str,
    block_names: &BTreeSet<String>,
    call_operator: bool,
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
            // types it takes count as such classes. Its declarator may wrap the function's
            // (`Vec& operator+=(Vec& a, ...)` returns a reference).
            let declarator = crate::lang::function_declarator(n);
            let head = declarator
                .and_then(|d| d.child_by_field_id(f.declarator))
                .map_or("", |d| crate::lang::text(d, src));
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
            if let Some(class) = class_reads_implicitly(n, src, &reads, call_operator) {
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
    call_operator: bool,
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
            let operator = head.contains("operator")
                && (call_operator || head.split_whitespace().collect::<String>() != "operator");
            head == last || head.starts_with('~') || operator
        } else {
            false
        };
        runs_implicitly && reads(def)
    });
    Some((last, bases, implicit))
}

/// The body's local lambdas (`auto stage = [&](float v) { ...; __syncthreads(); };`) by name:
/// whether each may synchronize the block, and a warp (a barrier or warp sync in its body, or a
/// call there of a helper that does one).
fn lambda_syncs<'s>(
    facts: &BodyFacts,
    graph: &CallGraph,
    helpers: &[HelperPlan],
    src: &'s str,
) -> BTreeMap<&'s str, (bool, bool)> {
    let k = crate::lang::kinds();
    let f = crate::lang::fields();
    let mut out = BTreeMap::new();
    for d in facts
        .nodes
        .iter()
        .filter(|n| n.kind_id() == k.init_declarator)
    {
        let Some(lambda) = d
            .child_by_field_id(f.value)
            .map(crate::lang::strip_parens)
            .filter(|v| v.kind() == "lambda_expression")
        else {
            continue;
        };
        let Some(name) = d
            .child_by_field_id(f.declarator)
            .filter(|n| n.kind_id() == k.identifier)
        else {
            continue;
        };
        let inside = |n: &Node| lambda.byte_range().contains(&n.start_byte());
        let calls = facts.calls.iter().filter(|c| inside(&c.node));
        let block = facts.barriers.iter().any(|b| inside(&b.node))
            || calls.clone().any(|c| graph.calls_barrier(c, helpers));
        let lanes = facts.warp_syncs.iter().any(inside)
            || calls.clone().any(|c| graph.calls_warp_sync(c, helpers));
        let e = out
            .entry(crate::lang::text(name, src))
            .or_insert((false, false));
        e.0 |= block;
        e.1 |= lanes;
    }
    out
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
