//! Every fixture: transformed output and diagnostics snapshotted, in-file EXPECT lines checked,
//! and the output re-parses without new syntax errors.

mod support;
// The command line's rendering, so that the snapshots show what it prints.
#[path = "../src/cli/render.rs"]
#[allow(dead_code)]
mod render;

use cupreempt::{transform, Options};
use render::render_plain;

fn outcome(k: &cupreempt::KernelReport) -> String {
    match (k.transformed, k.mode) {
        (true, Some(cupreempt::analysis::SyncMode::Plain)) => "transformed plain".into(),
        (true, Some(cupreempt::analysis::SyncMode::Predicated)) => "transformed predicated".into(),
        _ => format!("refused {}", k.codes.first().map_or("?", |c| c.id())),
    }
}

#[test]
fn fixtures_transform_as_expected() {
    insta::glob!("../fixtures", "*.cu", |path| {
        let src = std::fs::read_to_string(path).unwrap();
        let name = path.file_name().unwrap().to_string_lossy().to_string();
        let t = transform(
            &src,
            &name,
            &Options {
                verify: true,
                ..Options::default()
            },
        );

        let expected = support::expectations(&src);
        assert!(!expected.is_empty(), "{name} has no EXPECT lines");
        // Kernels of one name (overloads, a template's specializations) are expected in the
        // file's order: the n-th EXPECT line of a name is about its n-th kernel.
        let mut seen: std::collections::HashMap<&str, usize> = Default::default();
        for e in &expected {
            let nth = seen.entry(e.kernel.as_str()).or_default();
            let k = t
                .kernels
                .iter()
                .filter(|k| k.name == e.kernel)
                .nth(*nth)
                .unwrap_or_else(|| panic!("{name}: no kernel {} number {}", e.kernel, *nth + 1));
            *nth += 1;
            assert_eq!(outcome(k), e.outcome, "{name}: kernel {}", e.kernel);
        }

        // `// CHECK: text`: the output holds this text (outside the fixture's own comments).
        let generated: String = t
            .output
            .lines()
            .filter(|l| !l.trim_start().starts_with("// "))
            .collect::<Vec<_>>()
            .join("\n");
        for c in support::directives(&src, "CHECK") {
            assert!(
                generated.contains(c),
                "{name}: output lacks CHECK text `{c}`"
            );
        }

        // `// CHECK-NOT: text`: the output does not hold this text.
        for c in support::directives(&src, "CHECK-NOT") {
            assert!(
                !generated.contains(c),
                "{name}: output holds CHECK-NOT text `{c}`"
            );
        }

        let before = cupreempt::parse::error_count(&src);
        let after = cupreempt::parse::error_count(&t.output);
        assert!(
            after <= before,
            "{name}: output has {after} syntax errors, input {before}"
        );

        insta::assert_snapshot!("output", t.output);
        insta::assert_snapshot!("diagnostics", render_plain(&t.diagnostics, &name, &src));
    });
}

#[test]
fn line_directives_point_back_at_the_original() {
    let path = support::root().join("fixtures/grid_1d.cu");
    let src = std::fs::read_to_string(&path).unwrap();
    let opts = Options {
        line_directives: true,
        ..Options::default()
    };
    let t = transform(&src, "grid_1d.cu", &opts);
    // After every #line N, the next line is line N of the original.
    let lines: Vec<&str> = t.output.lines().collect();
    let original: Vec<&str> = src.lines().collect();
    let mut seen = 0;
    for (i, l) in lines.iter().enumerate() {
        if let Some(rest) = l.strip_prefix("#line ") {
            let n: usize = rest.split(' ').next().unwrap().parse().unwrap();
            assert_eq!(lines[i + 1], original[n - 1], "after `{l}`");
            seen += 1;
        }
    }
    assert!(seen >= 2, "{}", t.output);
}

#[test]
fn untouched_when_nothing_is_transformed() {
    let src = "__global__ void k(int* p) { cooperative_groups::this_grid().sync(); }\nint main() { k<<<1, 1>>>(0); }\n";
    let t = transform(
        src,
        "x.cu",
        &Options {
            verify: true,
            ..Options::default()
        },
    );
    assert_eq!(t.output, src);
    assert!(t.has_errors());
}

#[test]
fn a_second_run_is_refused() {
    let src = std::fs::read_to_string(support::root().join("fixtures/grid_1d.cu")).unwrap();
    let once = transform(
        &src,
        "a.cu",
        &Options {
            verify: true,
            ..Options::default()
        },
    );
    let twice = transform(
        &once.output,
        "a.cu",
        &Options {
            verify: true,
            ..Options::default()
        },
    );
    assert_eq!(twice.output, once.output);
    assert_eq!(twice.diagnostics[0].code.id(), "CP009");
}

/// A member that reads the block index, called at three places of one body through objects
/// whose class the text does not say (an array's elements), is one refusal labelled at each
/// call, not three copies of the same message (`check` joins a kernel's reasons into one line).
#[test]
fn calls_of_one_member_through_objects_are_one_refusal_labelled_at_each() {
    let src = r#"
struct Window {
  __device__ int first() const { return blockIdx.x * 64; }
};
__device__ void run(float* out, int w) {
  Window wins[2];
  if (w > 2) out[wins[0].first()] = 1.0f;
  else if (w > 1) out[wins[1].first() + 1] = 2.0f;
  else out[wins[w].first() + 2] = 3.0f;
}
__global__ void fill(float* out, int w) { run(out, w); }
"#;
    let t = transform(src, "a.cu", &Options::default());
    let members: Vec<_> = t
        .diagnostics
        .iter()
        .filter(|d| d.message.contains("member function `first`"))
        .collect();
    assert_eq!(members.len(), 1, "{:#?}", t.diagnostics);
    let calls = members[0]
        .labels
        .iter()
        .filter(|l| l.message == "called here")
        .count();
    assert_eq!(calls, 3, "{:#?}", members[0].labels);
}
