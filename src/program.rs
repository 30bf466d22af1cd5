//! Whole programs: what one file needs to know about the others. A launch is rewritten in the
//! file that launches, through the launch type that the transformed definition declares next to
//! the kernel; so a file may rewrite launches of kernels that it sees defined in a file it
//! includes (`KnownKernel`, `Options::known_kernels`). Which files those are comes from the
//! `#include` lines (`includes`, `resolve`), read the way the preprocessor resolves them. A
//! kernel that calls a device function of an included file which reads blockIdx/gridDim is
//! refused, and one that synchronizes counts as a barrier (`KnownHelper`,
//! `Options::known_helpers`).

use crate::analysis::{FunctionSite, HelperPlan, KernelPlan};
use crate::vocab::kernels_struct_name;
use regex::Regex;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::OnceLock;

/// A kernel as a launch in another file needs to know it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KnownKernel {
    pub name: String,
    /// False: left untouched there (its own file says why); launches of it stay plain, quietly.
    pub transformed: bool,
    /// Another transformed kernel has the same name in the same scope (its launch types are
    /// numbered).
    pub overloaded: bool,
    /// Another transformed kernel of its file has the same name in the same scope
    /// (`KernelPlan::overloaded_here`): launches choose among them by their arguments.
    pub overloaded_here: bool,
    /// How many transformed kernels of the same name come before it in its file.
    pub ordinal: usize,
    pub params: usize,
    /// How many arguments a launch of it can pass at most: every parameter, conditional ones
    /// included; None where a parameter is a pack.
    pub max_params: Option<usize>,
    pub template_params: usize,
    /// One of its template parameters is a pack.
    pub pack: bool,
    /// The default arguments of its last parameters, where a launch that leaves them out can
    /// pass them itself (`launch_defaults`); empty otherwise.
    pub defaults: Vec<String>,
    /// Declared there, not defined: what a launch needs to declare its wrappers itself.
    pub declaration: Option<Declaration>,
    /// Defined in an included file that is not transformed with this one (its path): it gets
    /// no wrappers, so launches of it stay plain, and say which file to transform too.
    pub untransformed_file: Option<String>,
}

/// A kernel that a file only declares (defined in another translation unit).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Declaration {
    /// Enclosing namespaces, outermost first.
    pub scope: Vec<String>,
    /// All before the name: `__global__ void `.
    pub specifiers: String,
    /// Parameter declarations, named, without default arguments.
    pub params: Vec<String>,
    /// A kernel template's: its template head, the same for a class (without default
    /// arguments where C++ forbids them), and its parameters as arguments (`T, N`).
    pub template: Option<DeclaredTemplate>,
}

/// The template parts of a declared kernel template (`Declaration::template`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DeclaredTemplate {
    /// `template <typename T, int N = 4>\n`
    pub head: String,
    /// The same where a copy stands alone (the selector's declaration): without a conditional
    /// group between the parameter list and the specifiers.
    pub head_alone: String,
    /// `template <typename T, int N>\n`
    pub class_head: String,
    /// `T, N`
    pub args: String,
}

/// `KnownKernel::max_params` of a parameter list.
fn max_params(list: &[crate::analysis::Param]) -> Option<usize> {
    (!list.iter().any(|p| p.pack)).then_some(list.len())
}

/// The default arguments of `list`'s last parameters, where a launch that leaves them out may
/// write them itself: a launch goes through a function pointer (launch.cuh), which takes every
/// argument, so `k<<<g, b>>>(p)` of `k(uint32_t* p, uint32_t* sums = NULL)` (a public hashing
/// miner's scan, an inference library's slice kernel with `bool on_top = true`) passes `NULL`
/// itself. Only literals (a number, `true`, `false`, `nullptr`, `NULL`, a character) and
/// empty braces (`Params p = {}`), which mean the same at the launch as in the kernel's head,
/// and only for parameters whose type
/// names no template parameter (a default takes no part in deduction, an argument does).
/// Empty where any of those parameters is not such, or where a preprocessor group chooses
/// among the parameters (`Param::before`).
fn launch_defaults(
    list: &[crate::analysis::Param],
    template_params: &[crate::analysis::TemplateParam],
) -> Vec<String> {
    static LITERAL: OnceLock<Regex> = OnceLock::new();
    let literal = LITERAL.get_or_init(|| {
        Regex::new(r"^(?:[-+]?(?:\d[\w.']*|\.\d[\w']*)|true|false|nullptr|NULL|'(?:\\.|[^'\\])')$")
            .expect("valid regex")
    });
    static WORD: OnceLock<Regex> = OnceLock::new();
    let word = WORD.get_or_init(|| Regex::new(r"[A-Za-z_]\w*").expect("valid regex"));
    if list.iter().any(|p| !p.before.is_empty() || p.pack) {
        return Vec::new();
    }
    let names: Vec<&str> = template_params
        .iter()
        .map(|t| t.arg.trim_end_matches("...").trim())
        .collect();
    let mut out = Vec::new();
    for p in list.iter().rev() {
        let Some(value) = crate::rewrite::default_of(&p.text) else {
            break;
        };
        let ty = crate::rewrite::strip_default(&p.text);
        // `{}` (`Params p = {}`) initializes the parameter as the same `{}` passed at the launch
        // does (the launch's call takes the kernel's parameter types).
        let value_initialized = value.starts_with('{')
            && value.ends_with('}')
            && value[1..value.len() - 1].trim().is_empty();
        let value = if value_initialized { "{}" } else { value };
        if !(literal.is_match(value) || value_initialized)
            || word.find_iter(&ty).any(|w| names.contains(&w.as_str()))
        {
            return Vec::new();
        }
        out.push(value.to_string());
    }
    out.reverse();
    out
}

impl KnownKernel {
    pub fn of(plan: &KernelPlan) -> KnownKernel {
        // A template only declared here is launched as its declaration says.
        let site = plan.family_declaration.as_ref().unwrap_or(&plan.site);
        KnownKernel {
            name: plan.site.name.clone(),
            transformed: plan.transformed(),
            overloaded: plan.overloaded,
            overloaded_here: plan.overloaded_here,
            ordinal: plan.ordinal,
            params: crate::analysis::unconditional_params(&site.param_list),
            max_params: max_params(&site.param_list),
            template_params: site.template_params.len(),
            pack: site.template_params.iter().any(|p| p.pack),
            defaults: launch_defaults(&site.param_list, &site.template_params),
            declaration: None,
            untransformed_file: None,
        }
    }

    /// A kernel that `src` only declares (`Analysis::declared_kernels`).
    pub fn declared(d: &FunctionSite, src: &str) -> KnownKernel {
        KnownKernel {
            name: d.name.clone(),
            transformed: true,
            overloaded: false,
            overloaded_here: false,
            ordinal: 0,
            params: crate::analysis::unconditional_params(&d.param_list),
            max_params: max_params(&d.param_list),
            template_params: d.template_params.len(),
            pack: d.template_params.iter().any(|p| p.pack),
            defaults: launch_defaults(&d.param_list, &d.template_params),
            declaration: Some(Declaration {
                scope: d.scope.clone(),
                specifiers: src[d.func.start_byte()..d.name_node.start_byte()].to_string(),
                params: d
                    .param_list
                    .iter()
                    .map(|p| crate::rewrite::strip_default(&p.declaration()))
                    .collect(),
                template: d
                    .is_template()
                    .then(|| crate::rewrite::declared_template(d, src)),
            }),
            untransformed_file: None,
        }
    }

    pub fn is_template(&self) -> bool {
        self.template_params > 0
    }

    /// Launch sites need the deducing form: templates and overloads.
    pub fn needs_selector(&self) -> bool {
        self.is_template() || self.overloaded
    }

    /// The launch type declared next to the transformed kernel.
    pub fn struct_name(&self) -> String {
        kernels_struct_name(&self.name, self.overloaded.then_some(self.ordinal))
    }
}

/// A device function of another file that a kernel here may call: one that reads blockIdx or
/// gridDim (it would read the persistent block's values: no task context can reach it from
/// here) or synchronizes the block (a barrier that the analysis here cannot see).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KnownHelper {
    pub name: String,
    /// The class that defines it, else its innermost namespace: a qualified call `X::f` in
    /// another file reaches X's own `f` (`CallGraph::calls_barrier`). The file's functions
    /// with an owner are listed even where they matter to callers for nothing else, so that
    /// such a call can tell that it does not reach another class's `f` that synchronizes.
    pub owner: Option<String>,
    pub reads_block_ids: bool,
    pub synchronizes: bool,
    /// Synchronizes the lanes of a warp by a fixed mask (a shuffle, a vote, `__syncwarp`),
    /// directly or through other helpers: a kernel here that calls it under a condition that
    /// differs between lanes is refused as for its own shuffle (CP004).
    pub synchronizes_warp: bool,
    /// Its file, transformed in the same run, gives it the task-context form
    /// (`Options::helpers_for_other_files`): a kernel here passes its context.
    pub with_ctx: bool,
    /// A member function (`operator()` for a functor's): called through objects, never given
    /// the context (`CallGraph::member_ctx`).
    pub member: bool,
    /// A definition in a region its file's parser cannot read (`Found::unread_helpers`): what
    /// it reads is unknown, so it counts as reading blockIdx/gridDim and synchronizing.
    pub unread: bool,
    /// It returns a block reduction's value (`HelperPlan::returns_block_vote`): the same in every
    /// thread, so a condition on it is block-uniform.
    pub returns_block_vote: bool,
    /// Its file, transformed in the same run, makes its live copy (`analysis::predicate`,
    /// "synchronizing helpers"): a predicated kernel here that calls it after a return calls
    /// the copy. Ok: per parameter, what the call must give; Err: why the file makes none.
    /// None: not a synchronizing helper of a file transformed in the run.
    pub live_copy: Option<Result<Vec<LiveParam>, String>>,
}

/// A parameter of a helper's live copy, as another file's call must fill it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LiveParam {
    /// A condition of a barrier in the copy reads it: the value must be the same in every
    /// thread of the block.
    pub uniform: bool,
    /// Taken by reference: the argument cannot be evaluated only while live.
    pub by_reference: bool,
}

impl KnownHelper {
    /// The helpers of a file that matter to callers in other files (what they reach through
    /// the file's other helpers is in the plans, `CallGraph::build`).
    /// A device function its file's parser could not read (`Found::unread_helpers`).
    pub fn unread(name: &str) -> KnownHelper {
        KnownHelper {
            name: name.to_string(),
            owner: None,
            reads_block_ids: true,
            synchronizes: true,
            synchronizes_warp: true,
            with_ctx: false,
            member: false,
            unread: true,
            returns_block_vote: false,
            live_copy: None,
        }
    }

    pub fn of_all(helpers: &[HelperPlan]) -> Vec<KnownHelper> {
        helpers
            .iter()
            .map(|h| KnownHelper {
                name: h.site.name.clone(),
                owner: crate::analysis::helper_owner(&h.site).map(str::to_string),
                reads_block_ids: h.needs_ctx || h.unfollowed_read,
                synchronizes: h.synchronizes,
                synchronizes_warp: h.synchronizes_warp,
                // Members only as functors, whose calls of any class pass the context
                // (`CallGraph::functor_calls`); other members take it only where the call
                // names their class, which another file's calls cannot be known to do.
                with_ctx: h.needs_ctx
                    && h.reached
                    && (!h.site.member
                        || h.site.name == crate::analysis::FUNCTOR_CALL && h.site.context_member())
                    && !h.unfollowed_read,
                member: h.site.member,
                unread: false,
                returns_block_vote: h.returns_block_vote(),
                live_copy: h.live_copy.as_ref().map(|copy| {
                    copy.as_ref().map_err(Clone::clone).map(|uniform| {
                        h.site
                            .param_list
                            .iter()
                            .zip(uniform)
                            .map(|(p, &uniform)| LiveParam {
                                uniform,
                                by_reference: p.text.contains('&'),
                            })
                            .collect()
                    })
                }),
            })
            .filter(|h| {
                h.reads_block_ids || h.synchronizes || h.synchronizes_warp || h.owner.is_some()
            })
            .collect()
    }
}

/// One `#include` line of a source.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Include {
    /// The name between the quotes or angle brackets.
    pub name: String,
    /// `"name"` (searched first next to the including file) rather than `<name>`.
    pub quoted: bool,
    /// Byte range of the name in the source, without its delimiters.
    pub name_range: std::ops::Range<usize>,
}

/// The `#include` lines of `src` with a literal name (a computed `#include MACRO` has none),
/// whatever the conditionals around them say: a superset of what the preprocessor reads.
pub fn includes(src: &str) -> Vec<Include> {
    static RE: OnceLock<Regex> = OnceLock::new();
    let re = RE.get_or_init(|| {
        Regex::new(r#"(?m)^[ \t]*#[ \t]*include[ \t]*(?:"([^"\n]+)"|<([^>\n]+)>)"#)
            .expect("valid regex")
    });
    re.captures_iter(src)
        .filter_map(|c| {
            let (m, quoted) = match (c.get(1), c.get(2)) {
                (Some(m), _) => (m, true),
                (None, Some(m)) => (m, false),
                _ => return None,
            };
            Some(Include {
                name: m.as_str().to_string(),
                quoted,
                name_range: m.range(),
            })
        })
        .collect()
}

/// Whether `text` names a file to include in a way that the launcher's copies cannot redirect
/// (`includes` finds no literal name): a computed `#include NAME` or `__has_include("...")`.
pub fn has_unredirected_include(text: &str) -> bool {
    static RE: OnceLock<Regex> = OnceLock::new();
    let re = RE.get_or_init(|| {
        Regex::new(
            r#"(?m)^[ \t]*#[ \t]*include(?:_next)?[ \t]+[A-Za-z_]|__has_include(?:_next)?[ \t]*\([ \t]*""#,
        )
        .expect("valid regex")
    });
    re.is_match(text)
}

/// Where the preprocessor finds `inc` included from a file in `dir`: next to the including
/// file first for a quoted name, then along `search` (the -I folders, in order).
pub fn resolve(inc: &Include, dir: &Path, search: &[PathBuf]) -> Option<PathBuf> {
    match beside(inc, dir) {
        Place::Found(p) => Some(p),
        Place::Absent => None,
        Place::Search => along(&inc.name, search),
    }
}

/// Where `resolve` looks first: the path itself for an absolute name, the includer's folder
/// for a quoted one.
enum Place {
    Found(PathBuf),
    /// An absolute name that is no file.
    Absent,
    /// Not decided here: the name is looked for along the -I folders.
    Search,
}

fn beside(inc: &Include, dir: &Path) -> Place {
    let name = Path::new(&inc.name);
    let here = if name.is_absolute() {
        name.to_path_buf()
    } else if inc.quoted {
        dir.join(name)
    } else {
        return Place::Search;
    };
    match (here.is_file(), name.is_absolute()) {
        (true, _) => Place::Found(here),
        (false, true) => Place::Absent,
        (false, false) => Place::Search,
    }
}

/// The first of `search`'s folders that holds `name`.
fn along(name: &str, search: &[PathBuf]) -> Option<PathBuf> {
    search.iter().map(|d| d.join(name)).find(|p| p.is_file())
}

/// What each file of a program defines for the files that include it: its kernels, and its
/// helpers that read blockIdx/gridDim or synchronize.
pub type Defines = std::collections::BTreeMap<PathBuf, (Vec<KnownKernel>, Vec<KnownHelper>)>;

/// Paths numbered in the order first met: the include graph and the resolver each hold many
/// files, most of them named many times, and compare and store numbers instead.
#[derive(Debug, Default, Clone)]
struct PathNumbers {
    numbers: std::collections::HashMap<PathBuf, u32>,
    paths: Vec<PathBuf>,
}

impl PathNumbers {
    /// `file`'s number, a new one (the next) where it was not met before.
    fn number(&mut self, file: &Path) -> u32 {
        if let Some(&n) = self.numbers.get(file) {
            return n;
        }
        let n = self.paths.len() as u32;
        self.numbers.insert(file.to_path_buf(), n);
        self.paths.push(file.to_path_buf());
        n
    }

    fn get(&self, file: &Path) -> Option<u32> {
        self.numbers.get(file).copied()
    }

    fn path(&self, n: u32) -> &PathBuf {
        &self.paths[n as usize]
    }
}

/// A program's include graph: the files each file includes (`include_closure`) and, turned
/// around, the files that include each, kept together as files are added. Files are numbered
/// as they are first named: a unit that includes a large library's headers (a PyTorch
/// extension reaches two thousand headers of torch, each including hundreds) holds millions
/// of edges, which as paths cost seconds of comparisons and hundreds of megabytes.
#[derive(Debug, Default, Clone)]
pub struct IncludeGraph {
    files: PathNumbers,
    /// By file number: the files it includes, in the order first reached (None: the file is
    /// only included, not in the graph itself).
    closures: Vec<Option<Vec<u32>>>,
    /// The same numbers sorted, to ask whether a file includes another.
    sorted: Vec<Vec<u32>>,
    includers: Vec<Vec<u32>>,
}

impl IncludeGraph {
    fn number_of(&mut self, file: &Path) -> u32 {
        let n = self.files.number(file);
        if n as usize == self.closures.len() {
            self.closures.push(None);
            self.sorted.push(Vec::new());
            self.includers.push(Vec::new());
        }
        n
    }

    /// Adds `file` with the files it includes (replacing what it had).
    pub fn insert(&mut self, file: PathBuf, closure: Vec<PathBuf>) {
        let f = self.number_of(&file);
        if let Some(old) = self.closures[f as usize].take() {
            for i in old {
                self.includers[i as usize].retain(|&by| by != f);
            }
        }
        let numbers: Vec<u32> = closure.iter().map(|p| self.number_of(p)).collect();
        for &i in numbers.iter().filter(|&&i| i != f) {
            self.includers[i as usize].push(f);
        }
        let mut sorted = numbers.clone();
        sorted.sort_unstable();
        sorted.dedup();
        self.sorted[f as usize] = sorted;
        self.closures[f as usize] = Some(numbers);
    }

    /// The number of `file`, where the graph names it (as a file or as one included).
    pub(crate) fn number(&self, file: &Path) -> Option<u32> {
        self.files.get(file)
    }

    pub(crate) fn path(&self, n: u32) -> &PathBuf {
        self.files.path(n)
    }

    pub(crate) fn closure_numbers(&self, n: u32) -> &[u32] {
        self.closures[n as usize].as_deref().unwrap_or(&[])
    }

    pub(crate) fn includer_numbers(&self, n: u32) -> &[u32] {
        &self.includers[n as usize]
    }

    /// Whether file `n`'s closure holds file `m`.
    pub(crate) fn includes(&self, n: u32, m: u32) -> bool {
        self.sorted[n as usize].binary_search(&m).is_ok()
    }

    /// The files `file` includes, as its closure was given (none where it is not in the graph).
    pub fn closure(&self, file: &Path) -> impl Iterator<Item = &PathBuf> + Clone {
        let numbers = self
            .number(file)
            .map_or(&[][..], |n| self.closure_numbers(n));
        numbers.iter().map(|&i| self.path(i))
    }

    /// The files of the graph that include `file`.
    pub fn includers(&self, file: &Path) -> impl Iterator<Item = &PathBuf> + Clone {
        let numbers = self
            .number(file)
            .map_or(&[][..], |n| self.includer_numbers(n));
        numbers.iter().map(|&i| self.path(i))
    }

    pub fn contains(&self, file: &Path) -> bool {
        self.number(file)
            .is_some_and(|n| self.closures[n as usize].is_some())
    }

    /// Every file some file of the graph includes.
    pub fn included(&self) -> impl Iterator<Item = &PathBuf> {
        self.closures
            .iter()
            .flatten()
            .flatten()
            .map(|&i| self.path(i))
    }
}

impl FromIterator<(PathBuf, Vec<PathBuf>)> for IncludeGraph {
    fn from_iter<I: IntoIterator<Item = (PathBuf, Vec<PathBuf>)>>(iter: I) -> IncludeGraph {
        let mut g = IncludeGraph::default();
        for (file, closure) in iter {
            g.insert(file, closure);
        }
        g
    }
}

/// What `file` knows of the program: what the files it includes define, together; the
/// members that read blockIdx/gridDim of the files that include it, since a kernel template
/// here may call one through a functor of its template type, instantiated there (a fused
/// optimizer's header and the functors of its `.cu` files); and the kernels its includers
/// define or include, since a header may launch kernels that only its includer brings in
/// before it (a miner's `common.hpp` includes the kernels' headers, then `hash.hpp`, which
/// launches them: its ten launches were CP101). Such a launch compiles as written only where
/// the kernel is declared before it, so the launch types the rewritten launch names are too.
/// Not those of a name `file` defines a kernel of itself: its launches of that name launch its
/// own (an application's variant headers, each defining `initialize`, included by one `.cu`
/// under `#if VARIANT == ...`: every launch of them was CP101).
///
/// `KnownIndex` numbers the files that define something once, for all the files asked about.
pub struct KnownIndex<'d> {
    defines: &'d Defines,
    graph: &'d IncludeGraph,
    /// The files that define something, by number: most headers of a large program define
    /// nothing, and each is asked about once per file that includes it.
    defining: std::collections::HashMap<u32, &'d (Vec<KnownKernel>, Vec<KnownHelper>)>,
}

impl<'d> KnownIndex<'d> {
    pub fn new(defines: &'d Defines, graph: &'d IncludeGraph) -> KnownIndex<'d> {
        let defining = defines
            .iter()
            .filter(|(_, (k, h))| !k.is_empty() || !h.is_empty())
            .filter_map(|(p, d)| Some((graph.number(p)?, d)))
            .collect();
        KnownIndex {
            defines,
            graph,
            defining,
        }
    }
}

impl KnownIndex<'_> {
    /// What `file` knows of the program (above).
    pub fn known_from(&self, file: &Path) -> (Vec<KnownKernel>, Vec<KnownHelper>) {
        let KnownIndex {
            defines,
            graph,
            defining,
        } = self;
        let mut known: (Vec<KnownKernel>, Vec<KnownHelper>) = Default::default();
        let Some(me) = graph.number(file) else {
            return known;
        };
        let own: Vec<&str> = defines
            .get(file)
            .map(|(k, _)| k.iter().map(|k| k.name.as_str()).collect())
            .unwrap_or_default();
        if defining.is_empty() {
            return known;
        }
        for f in graph.closure_numbers(me) {
            if let Some((k, h)) = defining.get(f) {
                known.0.extend(k.iter().cloned());
                known.1.extend(h.iter().cloned());
            }
        }
        // The files whose kernels a launch here may name once an includer has brought them in.
        let beside_kernels: Vec<(u32, Vec<&KnownKernel>)> = defining
            .iter()
            .filter(|(&f, _)| f != me)
            .map(|(&f, (kernels, _))| {
                let ks = kernels
                    .iter()
                    .filter(|k| gives_launch_types(k) && !own.contains(&k.name.as_str()))
                    .collect();
                (f, ks)
            })
            .filter(|(_, ks): &(u32, Vec<&KnownKernel>)| !ks.is_empty())
            .collect();
        for &includer in graph.includer_numbers(me) {
            if let Some((_, h)) = defining.get(&includer) {
                let members = h.iter().filter(|h| h.member && h.reads_block_ids);
                for m in members {
                    if !known.1.contains(m) {
                        known.1.push(m.clone());
                    }
                }
            }
            // The includer itself, then what it includes, in its closure's order.
            let closure = graph.closure_numbers(includer);
            let mut here: Vec<(usize, &Vec<&KnownKernel>)> = beside_kernels
                .iter()
                .filter(|(f, _)| *f == includer || graph.includes(includer, *f))
                .map(|(f, ks)| {
                    let at = if *f == includer {
                        0
                    } else {
                        1 + closure.iter().position(|c| c == f).unwrap_or(closure.len())
                    };
                    (at, ks)
                })
                .collect();
            here.sort_by_key(|&(at, _)| at);
            for (_, ks) in here {
                for &k in ks {
                    if !known.0.contains(k) {
                        known.0.push(k.clone());
                    }
                }
            }
        }
        known
    }
}

/// `Defines` of a program. `files`: its files, canonical, with their texts; `others`: files
/// they include that are not among them (headers found through `-I`), read for their macros
/// only, so that each file is read with the macros its own transform takes (a kernel header's
/// `LAUNCH_BOUNDS(256)` defined in a utility header outside the inputs: without it the
/// header's kernels were syntax errors here, and its includers' launches CP101); `graph`: what
/// each includes (made once by the caller, which needs it too).
/// A helper that reads block ids only through a helper of another file it includes is known as
/// such once that file is: the transforms are repeated with what the included files define
/// until nothing changes (a chain of headers one deeper each round). A file is transformed
/// again only when what its includes define has changed since its last transform.
pub fn defines_of(
    files: &[(PathBuf, String)],
    others: &BTreeMap<PathBuf, String>,
    graph: &IncludeGraph,
    opts: &crate::Options,
    memo: &MacroMemo,
) -> Defines {
    // Deeper chains of headers than this are not followed (their helpers stay unknown here,
    // and a kernel that reaches one through them is not told apart from before).
    const MAX_ROUNDS: usize = 8;
    let texts: std::collections::HashMap<&Path, &String> =
        files.iter().map(|(f, t)| (f.as_path(), t)).collect();
    let text_of = |q: &Path| {
        texts
            .get(q)
            .map(|t| (*t).clone())
            .or_else(|| others.get(q).cloned())
    };
    // Kernels and helpers spelled with execution-space macros (`GLOBAL void k()`) count too,
    // the macros defined by the inputs or by the other files read (a `global.h` that a unit
    // includes before a header of kernels spelled `KERNEL_SPEC void k()`), each file's read
    // once, into the memo that the macros in context read too.
    let definitions: Vec<(String, String)> = files
        .iter()
        .map(|(p, _)| p)
        .chain(others.keys())
        .filter_map(|p| memo.file_macros(p, &text_of))
        .flat_map(|m| m.definitions.clone())
        .collect();
    let (_, space_macros) = space_macro_names_of(&definitions);
    let relevant: Vec<&(PathBuf, String)> = files
        .iter()
        .filter(|(_, t)| {
            mentions_kernels(t)
                || t.contains("__device__")
                || space_macros.iter().any(|m| crate::lang::has_word(t, m))
        })
        .collect();
    // Each file is read with the macros of the files it includes, as its own transform takes
    // them (a kernel spelled `GLOBAL void k(...)`, GLOBAL defined in a header): read once here.
    let included_macros: Vec<IncludedMacros> = relevant
        .iter()
        .map(|(p, _)| {
            if opts.known_macros.definitions.is_empty() {
                memo.macros_in_context(graph, p, &text_of)
            } else {
                opts.known_macros.clone()
            }
        })
        .collect();
    let mut defines = Defines::new();
    // What each file was last transformed with, and what that gave.
    type Known = (Vec<KnownKernel>, Vec<KnownHelper>);
    let mut last: std::collections::BTreeMap<&PathBuf, (Known, Known)> = Default::default();
    for _ in 0..MAX_ROUNDS {
        let mut next = Defines::new();
        let index = KnownIndex::new(&defines, graph);
        for ((p, t), macros) in relevant.iter().zip(&included_macros) {
            let known = index.known_from(p);
            let result = match last.get(p) {
                Some((with, result)) if *with == known => result.clone(),
                _ => {
                    let mut o = opts.clone();
                    o.known_kernels.extend(known.0.iter().cloned());
                    o.known_helpers.extend(known.1.iter().cloned());
                    o.known_macros = macros.clone();
                    let tr = crate::transform(t, &p.display().to_string(), &o);
                    let result = (tr.defines, tr.helpers);
                    last.insert(p, (known, result.clone()));
                    result
                }
            };
            next.insert(p.clone(), result);
        }
        if next == defines {
            break;
        }
        defines = next;
    }
    number_namesakes(&mut defines);
    defines
}

/// Whether `k`, as its file reports it, is a kernel that file defines and gives launch types.
fn gives_launch_types(k: &KnownKernel) -> bool {
    k.transformed && k.declaration.is_none() && k.untransformed_file.is_none()
}

/// The kernel names that `file` and at least one other file of `defines` transform, each with
/// how many kernels of that name the files before `file` (by path) transform: `file`'s launch
/// types of that name are numbered after theirs (`Options::namesakes`). Overloads of one
/// kernel name spread over two headers would otherwise both declare `K__cupreempt_kernels`,
/// and a translation unit that includes both would not compile.
pub fn namesake_ordinals(defines: &Defines, file: &Path) -> BTreeMap<String, usize> {
    let Some((own, _)) = defines.get(file) else {
        return BTreeMap::new();
    };
    let own: std::collections::BTreeSet<&String> = own
        .iter()
        .filter(|k| gives_launch_types(k))
        .map(|k| &k.name)
        .collect();
    let mut out = BTreeMap::new();
    for name in own {
        let mut before = 0;
        let mut others = false;
        for (p, (ks, _)) in defines {
            if p == file {
                continue;
            }
            let n = ks
                .iter()
                .filter(|k| gives_launch_types(k) && k.name == **name)
                .count();
            others |= n > 0;
            if p.as_path() < file {
                before += n;
            }
        }
        if others {
            out.insert(name.clone(), before);
        }
    }
    out
}

/// The launch types that the files of `defines` declare, numbered across files where a name
/// is transformed in several (`namesake_ordinals`), as each file's own transform numbers them.
fn number_namesakes(defines: &mut Defines) {
    let ordinals: Vec<(PathBuf, BTreeMap<String, usize>)> = defines
        .keys()
        .map(|p| (p.clone(), namesake_ordinals(defines, p)))
        .filter(|(_, o)| !o.is_empty())
        .collect();
    for (p, o) in ordinals {
        if let Some((ks, _)) = defines.get_mut(&p) {
            for k in ks.iter_mut().filter(|k| gives_launch_types(k)) {
                if let Some(before) = o.get(&k.name) {
                    k.overloaded = true;
                    k.ordinal += before;
                }
            }
        }
    }
}

/// The files that `path` (whose text is `src`) includes, directly or through others, each once,
/// canonical, in the order first reached. `follow` says which resolved files count (and are
/// read in turn): the launcher leaves out the toolkit's and the system's headers.
pub fn include_closure(
    path: &Path,
    src: &str,
    search: &[PathBuf],
    follow: &dyn Fn(&Path) -> bool,
) -> Vec<PathBuf> {
    IncludeResolver::new(search).closure(path, src, follow)
}

/// `include_closure` for many files of one program: each file is read and its `#include`s
/// resolved once, however many closures pass through it. A unit of a PyTorch extension reaches
/// about two thousand headers of torch, and the closures of all of them, each resolved anew,
/// made 30 million `stat` and 31 million `readlink` calls for one file (55 s).
pub struct IncludeResolver<'a> {
    search: &'a [PathBuf],
    files: std::cell::RefCell<ResolvedFiles>,
}

/// The files an `IncludeResolver` has met, numbered.
#[derive(Default)]
struct ResolvedFiles {
    files: PathNumbers,
    /// By number: the files its `#include`s name and the preprocessor would find, in the
    /// order of its lines (None: not read yet).
    direct: Vec<Option<std::rc::Rc<[u32]>>>,
    /// Files read from disk.
    reads: usize,
    /// What `beside` found for a name in a folder, numbered; the same for every includer in
    /// that folder.
    beside: std::collections::HashMap<(PathBuf, String), Option<Option<u32>>>,
    /// What `along` found for a name, numbered: the same for every includer. Headers of a
    /// large library include the same names many times over, and each search probes every
    /// folder and makes the found path canonical (a `readlink` per component).
    searched: std::collections::HashMap<String, Option<u32>>,
    /// Searches along the -I folders made (tests).
    searches: usize,
}

impl ResolvedFiles {
    fn number(&mut self, file: &Path) -> u32 {
        let n = self.files.number(file);
        if n as usize == self.direct.len() {
            self.direct.push(None);
        }
        n
    }
}

impl<'a> IncludeResolver<'a> {
    pub fn new(search: &'a [PathBuf]) -> Self {
        IncludeResolver {
            search,
            files: Default::default(),
        }
    }

    /// The files that `text`, in folder `dir`, includes directly: found, canonical, numbered.
    fn resolved(&self, text: &str, dir: &Path) -> std::rc::Rc<[u32]> {
        includes(text)
            .iter()
            .filter_map(|inc| self.find(inc, dir))
            .collect()
    }

    /// As [`resolve`], the found file canonical and numbered; each place probed once per run
    /// (`beside`'s answer for a folder and name, `along`'s for a name).
    fn find(&self, inc: &Include, dir: &Path) -> Option<u32> {
        let number = |found: PathBuf| {
            let found = found.canonicalize().unwrap_or(found);
            self.files.borrow_mut().number(&found)
        };
        // A quoted or absolute name: `beside` first (Some: decided there, None: look along the
        // -I folders); a `<name>` only along them.
        if inc.quoted || Path::new(&inc.name).is_absolute() {
            let key = (dir.to_path_buf(), inc.name.clone());
            let known = self.files.borrow().beside.get(&key).copied();
            let here = known.unwrap_or_else(|| {
                let here = match beside(inc, dir) {
                    Place::Found(p) => Some(Some(number(p))),
                    Place::Absent => Some(None),
                    Place::Search => None,
                };
                self.files.borrow_mut().beside.insert(key, here);
                here
            });
            if let Some(here) = here {
                return here;
            }
        }
        let known = self.files.borrow().searched.get(&inc.name).copied();
        known.unwrap_or_else(|| {
            self.files.borrow_mut().searches += 1;
            let found = along(&inc.name, self.search).map(number);
            self.files
                .borrow_mut()
                .searched
                .insert(inc.name.clone(), found);
            found
        })
    }

    /// The direct includes of file `n`, read from disk the first time it is asked.
    fn direct_of(&self, n: u32) -> std::rc::Rc<[u32]> {
        let path = {
            let files = self.files.borrow();
            if let Some(d) = &files.direct[n as usize] {
                return d.clone();
            }
            files.files.path(n).clone()
        };
        let text = std::fs::read(&path)
            .map(|b| String::from_utf8_lossy(&b).into_owned())
            .unwrap_or_default();
        self.files.borrow_mut().reads += 1;
        let d = self.resolved(&text, path.parent().unwrap_or(Path::new(".")));
        self.files.borrow_mut().direct[n as usize] = Some(d.clone());
        d
    }

    /// As [`include_closure`]: `src` is `path`'s text (which may differ from the file's).
    pub fn closure(&self, path: &Path, src: &str, follow: &dyn Fn(&Path) -> bool) -> Vec<PathBuf> {
        let start = path.canonicalize().unwrap_or_else(|_| path.to_path_buf());
        let first = self.resolved(src, start.parent().unwrap_or(Path::new(".")));
        let me = self.files.borrow_mut().number(&start);
        let mut seen = std::collections::HashSet::from([me]);
        let mut out = Vec::new();
        let mut todo = vec![first];
        while let Some(direct) = todo.pop() {
            for &found in direct.iter() {
                if seen.contains(&found) {
                    continue;
                }
                let path = self.files.borrow().files.path(found).clone();
                if !follow(&path) {
                    continue;
                }
                seen.insert(found);
                out.push(path);
                todo.push(self.direct_of(found));
            }
        }
        out
    }
}

/// The `#define`s of a file's text, as (name, replacement text), in order: what the macros of
/// an included file expand to (`Options::known_macros`). A function-like macro's parameter
/// list is left out; line continuations stay in the text (as `\\\n` where the file's lines end
/// in `\r\n`, `parse::without_carriage_returns`).
pub fn macro_definitions(text: &str) -> Vec<(String, String)> {
    included_macros(text).definitions
}

/// The `#define`s of the files one file includes, as `Options` takes them.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct IncludedMacros {
    /// (name, replacement text), each file's in order (`macro_definitions`).
    pub definitions: Vec<(String, String)>,
    /// The function-like ones' parameters, in the same order.
    pub parameters: Vec<(String, Vec<String>)>,
    /// The files' functions, as the uniformity analysis reads a call of one
    /// (`uniformity::IncludedFunctions`).
    pub functions: crate::analysis::IncludedFunctions,
    /// Per definition, in the same order: the macros that must be defined for it to be in
    /// effect, from the conditionals around it that test one macro alone
    /// (`parse::defined_only_branches`). Missing entries count as none.
    pub requires: Vec<Vec<String>>,
    /// The same for `parameters`.
    pub parameter_requires: Vec<Vec<String>>,
}

impl IncludedMacros {
    /// Appends `from`'s definitions and parameters whose names `keep` accepts, each with its
    /// requirements (the lists stay parallel: requirements are padded to their lists' lengths
    /// first, as a list given by a caller may lack them).
    fn extend_where(&mut self, from: &IncludedMacros, keep: impl Fn(&str) -> bool) {
        self.requires.resize(self.definitions.len(), Vec::new());
        self.parameter_requires
            .resize(self.parameters.len(), Vec::new());
        for (i, d) in from
            .definitions
            .iter()
            .enumerate()
            .filter(|(_, d)| keep(&d.0))
        {
            self.definitions.push(d.clone());
            self.requires
                .push(from.requires.get(i).cloned().unwrap_or_default());
        }
        for (i, q) in from
            .parameters
            .iter()
            .enumerate()
            .filter(|(_, q)| keep(&q.0))
        {
            self.parameters.push(q.clone());
            self.parameter_requires
                .push(from.parameter_requires.get(i).cloned().unwrap_or_default());
        }
    }

    /// The macros that must be defined for every definition of `name` to be in effect, one
    /// list per definition; None where `name` has no definition here.
    pub fn requirements_of(&self, name: &str) -> Option<Vec<&[String]>> {
        let found: Vec<&[String]> = self
            .definitions
            .iter()
            .enumerate()
            .filter(|(_, (n, _))| n == name)
            .map(|(i, _)| self.requires.get(i).map_or(&[][..], Vec::as_slice))
            .collect();
        (!found.is_empty()).then_some(found)
    }

    /// These macros without the definitions of the names in `names` that are in effect only
    /// where one of `undefined` is defined (and without their parameters).
    pub fn without(&self, names: &[String], undefined: &[String]) -> IncludedMacros {
        let keep = |n: &String, requires: Option<&Vec<String>>| {
            !names.contains(n) || !requires.is_some_and(|r| r.iter().any(|x| undefined.contains(x)))
        };
        let (definitions, requires) = self
            .definitions
            .iter()
            .enumerate()
            .filter(|(i, (n, _))| keep(n, self.requires.get(*i)))
            .map(|(i, d)| (d.clone(), self.requires.get(i).cloned().unwrap_or_default()))
            .unzip();
        let (parameters, parameter_requires) = self
            .parameters
            .iter()
            .enumerate()
            .filter(|(i, (n, _))| keep(n, self.parameter_requires.get(*i)))
            .map(|(i, p)| {
                let r = self.parameter_requires.get(i).cloned().unwrap_or_default();
                (p.clone(), r)
            })
            .unzip();
        IncludedMacros {
            definitions,
            parameters,
            functions: self.functions.clone(),
            requires,
            parameter_requires,
        }
    }
}

/// The parameters of a text's function-like `#define`s (`...` as `__VA_ARGS__`).
pub fn macro_parameters(text: &str) -> Vec<(String, Vec<String>)> {
    included_macros(text).parameters
}

/// A text's `#define`s, both lists from one reading (its functions are the memo's to read,
/// `MacroMemo::macros_of`: `macro_definitions` serves callers that want the macros alone).
fn included_macros(text: &str) -> IncludedMacros {
    let mut out = IncludedMacros::default();
    let text = crate::parse::without_carriage_returns(text);
    let defines = crate::parse::defines(&text);
    let branches = if defines.is_empty() {
        Vec::new()
    } else {
        crate::parse::defined_only_branches(&text)
    };
    for d in defines {
        let at = d.name.as_ptr() as usize - text.as_ptr() as usize;
        let requires: Vec<String> = branches
            .iter()
            .filter(|(r, _)| r.contains(&at))
            .map(|(_, name)| name.clone())
            .collect();
        out.definitions
            .push((d.name.to_string(), d.body.to_string()));
        if let Some(list) = d.params {
            let params = crate::parse::macro_parameter_list(list);
            out.parameters.push((d.name.to_string(), params));
            out.parameter_requires.push(requires.clone());
        }
        out.requires.push(requires);
    }
    out
}

/// Each file's own `#define`s, read once per run however many closures pass through the file:
/// the units of a PyTorch extension share thousands of torch's headers, and reading every
/// header's macros again for each closure made `check` of 111 such files take 17 s.
#[derive(Default)]
pub struct MacroMemo {
    by_file: std::cell::RefCell<std::collections::HashMap<PathBuf, std::rc::Rc<IncludedMacros>>>,
    /// Per translation unit, the functions it and its includes declare (`macros_in_context`).
    unit_functions: std::cell::RefCell<
        std::collections::HashMap<PathBuf, std::rc::Rc<crate::analysis::IncludedFunctions>>,
    >,
}

impl MacroMemo {
    /// The macros of the files in `closure` (the files one file includes), each file's in
    /// order. `text_of` is asked for a file's text the first time the file is met.
    pub fn macros_of<'a>(
        &self,
        closure: impl IntoIterator<Item = &'a PathBuf>,
        text_of: &dyn Fn(&Path) -> Option<String>,
    ) -> IncludedMacros {
        let mut out = IncludedMacros::default();
        for p in closure {
            let Some(m) = self.file_macros(p, text_of) else {
                continue;
            };
            out.extend_where(&m, |_| true);
            out.functions.merge(&m.functions);
        }
        out
    }

    /// One file's own macros and functions, read the first time the file is met.
    fn file_macros(
        &self,
        p: &PathBuf,
        text_of: &dyn Fn(&Path) -> Option<String>,
    ) -> Option<std::rc::Rc<IncludedMacros>> {
        if let Some(m) = self.by_file.borrow().get(p).cloned() {
            return Some(m);
        }
        let t = text_of(p)?;
        let mut m = included_macros(&t);
        m.functions = crate::analysis::IncludedFunctions::of(&t, &m.definitions, &m.parameters);
        let m = std::rc::Rc::new(m);
        self.by_file.borrow_mut().insert(p.clone(), m.clone());
        Some(m)
    }

    /// `macros_of` the files `file` includes, with the functions that every translation unit
    /// including it (a file of `graph` that no file of it includes) declares, itself or
    /// through its includes: a header of kernels is compiled only inside those units, after
    /// what they include first (MAGMA's `*_template_kernel_vbatched.cuh` call `magma_ceildiv`
    /// of `magma_internal.h`, which only their includers include). A name is a uniform helper
    /// there only if it is one in every unit (`IncludedFunctions::meet`). Asked only for files
    /// that may define kernels (`mentions_kernels`) or call `__syncthreads` (a helper's live
    /// copy is planned with them: MAGMA's `gemm_template_device.cuh` includes nothing and calls
    /// `gemm_template_device_defs.cuh`'s functions): only those analyses read functions.
    pub fn macros_in_context(
        &self,
        graph: &IncludeGraph,
        file: &Path,
        text_of: &dyn Fn(&Path) -> Option<String>,
    ) -> IncludedMacros {
        let mut out = self.macros_of(graph.closure(file), text_of);
        // Every file whose closure holds it (`includers` is transitive) that no file includes.
        let units: Vec<&PathBuf> = graph
            .includers(file)
            .filter(|u| graph.includers(u).next().is_none())
            .collect();
        let Some(text) = text_of(file) else {
            return out;
        };
        if !units.is_empty() {
            self.add_units_macros(&mut out, graph, &units, &text, text_of);
        }
        if units.is_empty() || !(mentions_kernels(&text) || text.contains("__syncthreads")) {
            return out;
        }
        let mut shared: Option<crate::analysis::IncludedFunctions> = None;
        for u in units {
            let cached = self.unit_functions.borrow().get(u).cloned();
            let f = match cached {
                Some(f) => f,
                None => {
                    let f = std::rc::Rc::new(
                        self.macros_of(graph.closure(u).chain([u]), text_of)
                            .functions,
                    );
                    self.unit_functions
                        .borrow_mut()
                        .insert(u.clone(), f.clone());
                    f
                }
            };
            shared = Some(match shared {
                None => (*f).clone(),
                Some(s) => s.meet(&f),
            });
        }
        if let Some(shared) = shared {
            out.functions.merge(&shared);
        }
        out
    }
}

impl MacroMemo {
    /// The macros that every unit of `units` defines, itself or through its includes, and that
    /// `text` (a header they include) names without any file it includes defining them, added
    /// to `out`: the header is compiled only inside those units, after what they include
    /// first. A header of kernels whose type or execution-space macro only its includers'
    /// headers define (`KERNEL_SPEC void fill(...)`, `DEVICE T f()`, with `global.h` included
    /// by the unit before it, as cuCollections' `static_map_kernels.cuh` and pytorch3d's
    /// pulsar headers are written) had no kernel found, in `check` and in a build through the
    /// launcher alike.
    fn add_units_macros(
        &self,
        out: &mut IncludedMacros,
        graph: &IncludeGraph,
        units: &[&PathBuf],
        text: &str,
        text_of: &dyn Fn(&Path) -> Option<String>,
    ) {
        let words: std::collections::HashSet<&str> = crate::lang::identifiers(text).collect();
        let known: std::collections::HashSet<&str> =
            out.definitions.iter().map(|(n, _)| n.as_str()).collect();
        let wanted = |n: &str| words.contains(n) && !known.contains(n);
        // Each unit's definitions of the wanted names, its files' memos read in place (a unit
        // of a large library holds thousands of definitions, few of them named here).
        let per_unit: Vec<IncludedMacros> = units
            .iter()
            .map(|u| {
                let mut mine = IncludedMacros::default();
                for p in graph.closure(u).chain([*u]) {
                    if let Some(m) = self.file_macros(p, text_of) {
                        mine.extend_where(&m, wanted);
                    }
                }
                mine
            })
            .collect();
        // Only what every unit defines, as the first unit defines it.
        let Some((first, others)) = per_unit.split_first() else {
            return;
        };
        let everywhere = |n: &str| {
            others
                .iter()
                .all(|m| m.definitions.iter().any(|d| d.0 == n))
        };
        out.extend_where(first, everywhere);
    }
}

/// Whether a file may define or launch kernels, by its text (cheap, before any parse): a `<<<`
/// or a `__global__` outside comments, the `__global__` outside preprocessor lines too. A header
/// that only defines the keyword for another compiler (NVIDIA Warp's `cuda_crt.h`, for Clang's
/// CUDA: `#define __global__ __attribute__((global))`, behind `#if defined(__clang__)`) or names
/// it in a comment has no kernel to transform; read as a program it gave 24 syntax warnings
/// (CP100) in every compile of a unit that includes it. A kernel spelled through a macro is
/// found by the macro's name (`mentions_kernels_with`).
pub fn mentions_kernels(src: &str) -> bool {
    if !src.contains("__global__") && !src.contains("<<<") {
        return false;
    }
    let code = crate::lang::without_comments(src);
    let found = crate::lang::lines_in_directives(&code).any(|(line, in_directive)| {
        line.contains("<<<") || (!in_directive && crate::lang::has_word(line, "__global__"))
    });
    found
}

/// Execution-space macros of `texts` (their `#define`s, `parse::execution_space_macros`): the
/// names that stand for `__global__`, and all of them (the device ones too).
pub fn space_macro_names<'a>(texts: impl Iterator<Item = &'a str>) -> (Vec<String>, Vec<String>) {
    let defs: Vec<(String, String)> = texts.flat_map(macro_definitions).collect();
    space_macro_names_of(&defs)
}

/// `space_macro_names` of definitions already read.
fn space_macro_names_of(defs: &[(String, String)]) -> (Vec<String>, Vec<String>) {
    let m = crate::parse::execution_space_macros(&[], defs);
    let global = m
        .iter()
        .filter(|(_, w)| w.iter().any(|w| w == "__global__"))
        .map(|(n, _)| n.clone())
        .collect();
    (global, m.into_keys().collect())
}

/// `mentions_kernels`, or a use of one of `global_macros` (a kernel spelled
/// `GLOBAL static void k(...)`, its launches elsewhere).
pub fn mentions_kernels_with(src: &str, global_macros: &[String]) -> bool {
    mentions_kernels(src) || global_macros.iter().any(|m| crate::lang::has_word(src, m))
}

#[cfg(test)]
mod tests {
    #[test]
    fn computed_includes_and_has_include_are_told_apart_from_literal_names() {
        assert!(has_unredirected_include("#define H \"a.h\"\n#include H\n"));
        assert!(has_unredirected_include("  # include_next NEXT\n"));
        assert!(has_unredirected_include(
            "#if __has_include(\"cfg.h\")\n#endif\n"
        ));
        assert!(!has_unredirected_include(
            "#include \"a.h\"\n#include <b.h>\n"
        ));
        assert!(!has_unredirected_include(
            "#if __has_include(<cuda_fp8.h>)\n#endif\n"
        ));
    }

    use super::*;

    #[test]
    fn kernels_are_mentioned_in_code_not_in_comments_or_keyword_definitions() {
        assert!(mentions_kernels("__global__ void k() {}\n"));
        assert!(mentions_kernels("static __global__\nvoid k();\n"));
        assert!(mentions_kernels("void f() { k<<<1, 1>>>(); }\n"));
        assert!(
            mentions_kernels("#define RUN(k) k<<<1, 1>>>()\n"),
            "a launch in a macro body is rewritten there"
        );
        // Warp's header for Clang's CUDA: the keyword defined, no kernel.
        assert!(!mentions_kernels(
            "#if defined(__clang__)\n#define __global__ __attribute__((global))\n#endif\n"
        ));
        assert!(!mentions_kernels(
            "#define SPACES \\\n  __global__ \\\n  x\nint y;\n"
        ));
        assert!(!mentions_kernels(
            "// __global__ kernels live elsewhere\nint x;\n"
        ));
        assert!(!mentions_kernels("/* a <<< b\n __global__ */ int x;\n"));
        assert!(!mentions_kernels("const char* s = \"// \"; int x;\n"));
        assert!(
            mentions_kernels("const char* s = \"// \"; __global__ void k();\n"),
            "a `//` inside a string starts no comment"
        );
        assert!(mentions_kernels("int a; /* c */ __global__ void k();\n"));
    }

    #[test]
    fn include_lines_with_their_name_ranges() {
        let src =
            "#include \"a/k.cuh\"\n  #  include <vector>\n#include MACRO\n// #include \"no\"\n";
        let inc = includes(src);
        assert_eq!(inc.len(), 2, "{inc:?}");
        assert_eq!((inc[0].name.as_str(), inc[0].quoted), ("a/k.cuh", true));
        assert_eq!(&src[inc[0].name_range.clone()], "a/k.cuh");
        assert_eq!((inc[1].name.as_str(), inc[1].quoted), ("vector", false));
    }

    #[test]
    fn quoted_names_are_found_next_to_the_includer_first() {
        let root = std::env::temp_dir().join(format!("cupreempt-program-{}", std::process::id()));
        let (here, other) = (root.join("here"), root.join("other"));
        std::fs::create_dir_all(&here).unwrap();
        std::fs::create_dir_all(&other).unwrap();
        std::fs::write(here.join("k.cuh"), "").unwrap();
        std::fs::write(other.join("k.cuh"), "").unwrap();
        let quoted = &includes("#include \"k.cuh\"\n")[0];
        let angled = &includes("#include <k.cuh>\n")[0];
        let search = [other.clone()];
        assert_eq!(resolve(quoted, &here, &search), Some(here.join("k.cuh")));
        assert_eq!(resolve(angled, &here, &search), Some(other.join("k.cuh")));
        assert_eq!(resolve(angled, &here, &[]), None);
        std::fs::remove_dir_all(&root).unwrap();
    }

    /// One resolver reads each file once however many closures reach it, and each closure is
    /// the files in the order the preprocessor's includes first reach them, as a walk that
    /// reads every file anew finds them.
    #[test]
    fn a_resolver_reads_each_file_once_and_keeps_the_order() {
        let root = std::env::temp_dir().join(format!("cupreempt-resolver-{}", std::process::id()));
        let (here, lib) = (root.join("here"), root.join("lib"));
        std::fs::create_dir_all(&here).unwrap();
        std::fs::create_dir_all(&lib).unwrap();
        // Twenty library headers, each including the next three and the first (a cycle),
        // some by a name that also exists next to the includer. h3.h names "h5.h" quoted, as
        // here/a.cuh does: each finds the one beside it. a.cuh's quoted "h9.h" is not beside
        // it, and is found along the -I folders as <h9.h> is.
        for i in 0..20 {
            let mut text: String = [(i + 1) % 20, (i + 2) % 20, (i + 3) % 20, 0]
                .iter()
                .map(|j| format!("#include <h{j}.h>\n"))
                .collect();
            if i == 3 {
                text.push_str("#include \"h5.h\"\n");
            }
            std::fs::write(lib.join(format!("h{i}.h")), text).unwrap();
        }
        std::fs::write(here.join("h5.h"), "#include <h7.h>\n").unwrap();
        std::fs::write(
            here.join("a.cuh"),
            "#include \"h5.h\"\n#include <h9.h>\n#include \"h9.h\"\n",
        )
        .unwrap();
        let search = [lib.clone()];
        // The walk as written before the resolver: every file read when reached.
        let walk = |path: &Path, src: &str| -> Vec<PathBuf> {
            let start = path.canonicalize().unwrap();
            let mut seen = std::collections::BTreeSet::from([start.clone()]);
            let (mut out, mut todo) = (Vec::new(), vec![(start, src.to_string())]);
            while let Some((file, text)) = todo.pop() {
                for inc in includes(&text) {
                    let Some(found) = resolve(&inc, file.parent().unwrap(), &search) else {
                        continue;
                    };
                    let found = found.canonicalize().unwrap();
                    if seen.insert(found.clone()) {
                        out.push(found.clone());
                        todo.push((found.clone(), std::fs::read_to_string(&found).unwrap()));
                    }
                }
            }
            out
        };
        let resolver = IncludeResolver::new(&search);
        let mut files: Vec<PathBuf> = (0..20).map(|i| lib.join(format!("h{i}.h"))).collect();
        files.push(here.join("a.cuh"));
        files.push(here.join("h5.h"));
        for f in &files {
            let src = std::fs::read_to_string(f).unwrap();
            assert_eq!(
                resolver.closure(f, &src, &|_| true),
                walk(f, &src),
                "{}",
                f.display()
            );
        }
        // Each header read once (the starting files' texts are given, not read, but each is
        // reached from another too): the twenty, and here/h5.h.
        assert_eq!(resolver.files.borrow().reads, 21);
        // Each name searched for along the -I folders once: h0.h to h19.h, and "h9.h"
        // found there the same.
        assert_eq!(resolver.files.borrow().searches, 20);
        // What `follow` leaves out is neither listed nor read through.
        let src = std::fs::read_to_string(here.join("a.cuh")).unwrap();
        let local = |p: &Path| p.starts_with(here.canonicalize().unwrap());
        assert_eq!(
            IncludeResolver::new(&search).closure(&here.join("a.cuh"), &src, &local),
            [here.join("h5.h").canonicalize().unwrap()]
        );
        std::fs::remove_dir_all(&root).unwrap();
    }

    /// Each file's macros are read once however many closures hold it, and every closure
    /// gets its files' macros in its own order.
    #[test]
    fn a_macro_memo_reads_each_file_once() {
        let texts: BTreeMap<PathBuf, String> = [
            ("/a.h", "#define A 1\n#define F(x, ...) x\n"),
            ("/b.h", "#define B __device__\n"),
            ("/c.h", "#define C A\n"),
        ]
        .iter()
        .map(|(p, t)| (PathBuf::from(p), t.to_string()))
        .collect();
        let asked = std::cell::Cell::new(0);
        let text_of = |p: &Path| {
            asked.set(asked.get() + 1);
            texts.get(p).cloned()
        };
        let memo = MacroMemo::default();
        let closure =
            |names: &[&str]| -> Vec<PathBuf> { names.iter().map(PathBuf::from).collect() };
        let first = memo.macros_of(&closure(&["/a.h", "/b.h"]), &text_of);
        let second = memo.macros_of(&closure(&["/c.h", "/a.h", "/missing.h"]), &text_of);
        let names = |m: &IncludedMacros| -> Vec<String> {
            m.definitions.iter().map(|(n, _)| n.clone()).collect()
        };
        assert_eq!(names(&first), ["A", "F", "B"]);
        assert_eq!(names(&second), ["C", "A", "F"]);
        assert_eq!(
            second.parameters,
            [(
                "F".to_string(),
                vec!["x".to_string(), "__VA_ARGS__".to_string()]
            )]
        );
        // a.h, b.h, c.h once each; the missing file is asked each time it is met.
        assert_eq!(asked.get(), 4);
    }

    /// The graph answers both ways, and a file added again replaces what it included.
    #[test]
    fn the_include_graph_keeps_includers_with_closures() {
        let p = |s: &str| PathBuf::from(s);
        let all = |i: &mut dyn Iterator<Item = &PathBuf>| i.cloned().collect::<Vec<PathBuf>>();
        let mut g: IncludeGraph = [
            (p("/a.cu"), vec![p("/a.cu"), p("/h.cuh"), p("/i.cuh")]),
            (p("/b.cu"), vec![p("/b.cu"), p("/h.cuh")]),
        ]
        .into_iter()
        .collect();
        assert_eq!(
            all(&mut g.includers(Path::new("/h.cuh"))),
            [p("/a.cu"), p("/b.cu")]
        );
        assert_eq!(
            all(&mut g.includers(Path::new("/a.cu"))),
            [] as [PathBuf; 0]
        );
        assert!(g.contains(Path::new("/b.cu")) && !g.contains(Path::new("/h.cuh")));
        g.insert(p("/a.cu"), vec![p("/a.cu"), p("/i.cuh")]);
        assert_eq!(all(&mut g.includers(Path::new("/h.cuh"))), [p("/b.cu")]);
        assert_eq!(all(&mut g.includers(Path::new("/i.cuh"))), [p("/a.cu")]);
        assert_eq!(
            all(&mut g.closure(Path::new("/a.cu"))),
            [p("/a.cu"), p("/i.cuh")]
        );
        assert_eq!(all(&mut g.closure(Path::new("/x.cu"))), [] as [PathBuf; 0]);
        // Numbered both ways: /b.cu includes /h.cuh, not /i.cuh.
        let (b, h, i) = (
            g.number(Path::new("/b.cu")).unwrap(),
            g.number(Path::new("/h.cuh")).unwrap(),
            g.number(Path::new("/i.cuh")).unwrap(),
        );
        assert!(g.includes(b, h) && !g.includes(b, i));
        assert!(g.number(Path::new("/x.cu")).is_none());
    }
}
