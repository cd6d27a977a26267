//! No production function over 60 lines (its signature to its closing brace), so each does one
//! thing a reader can hold: counted from the parsed source (syn), not by a pattern, and only a
//! handful of named exceptions, each with its reason.

use std::fs;
use std::path::Path;

use syn::visit::{self, Visit};

const MAX_LINES: usize = 60;

/// The functions allowed to be longer, by `path::function`, and why. Keep it a handful: a new
/// entry needs a reason a reviewer accepts, not a function that grew.
const ALLOWED: &[(&str, &str)] = &[(
    "src/metrics/mod.rs::register",
    "one registration per metric, the registry's one table (name, help, kind); \
     split, it would be several tables to keep in step",
)];

/// The production functions of one file: `(name, lines)`, tests left out.
struct Functions {
    found: Vec<(String, usize)>,
}

/// Whether `attrs` mark test-only code: `#[test]`, `#[tokio::test]`, `#[cfg(test)]`.
fn test_only(attrs: &[syn::Attribute]) -> bool {
    attrs.iter().any(|attr| {
        let path = attr.path();
        let tested = path.segments.last().is_some_and(|s| s.ident == "test");
        let cfg_test = path.is_ident("cfg") && attr.parse_args::<syn::Ident>().is_ok_and(|i| i == "test");
        tested || cfg_test
    })
}

impl Functions {
    fn record(&mut self, name: &syn::Ident, signature: &syn::Signature, block: &syn::Block) {
        let lines = block.brace_token.span.close().end().line + 1 - signature.fn_token.span.start().line;
        self.found.push((name.to_string(), lines));
    }
}

impl<'ast> Visit<'ast> for Functions {
    fn visit_item_mod(&mut self, item: &'ast syn::ItemMod) {
        if !test_only(&item.attrs) {
            visit::visit_item_mod(self, item);
        }
    }

    fn visit_item_impl(&mut self, item: &'ast syn::ItemImpl) {
        if !test_only(&item.attrs) {
            visit::visit_item_impl(self, item);
        }
    }

    fn visit_item_fn(&mut self, item: &'ast syn::ItemFn) {
        if !test_only(&item.attrs) {
            self.record(&item.sig.ident, &item.sig, &item.block);
            visit::visit_item_fn(self, item);
        }
    }

    fn visit_impl_item_fn(&mut self, item: &'ast syn::ImplItemFn) {
        if !test_only(&item.attrs) {
            self.record(&item.sig.ident, &item.sig, &item.block);
            visit::visit_impl_item_fn(self, item);
        }
    }

    fn visit_trait_item_fn(&mut self, item: &'ast syn::TraitItemFn) {
        if let Some(block) = item.default.as_ref().filter(|_| !test_only(&item.attrs)) {
            self.record(&item.sig.ident, &item.sig, block);
        }
    }
}

/// Every production file: the crates' sources without their test files (`tests.rs`, `tests/`,
/// the fixtures the tests build from).
fn production_files(root: &Path) -> Vec<std::path::PathBuf> {
    let mut files = Vec::new();
    for dir in ["src", "core/src"] {
        super::rust_files(&root.join(dir), &mut files);
    }
    files.retain(|file| {
        let relative = file.strip_prefix(root).unwrap_or(file);
        let test_file = relative.components().any(|c| matches!(c.as_os_str().to_str(), Some("tests" | "tests.rs")));
        let fixtures = relative.to_string_lossy().contains("fixtures");
        !test_file && !fixtures
    });
    files
}

#[test]
fn no_production_function_is_over_60_lines_but_the_named_exceptions() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let mut long = Vec::new();
    for file in production_files(root) {
        let source = fs::read_to_string(&file).expect("a readable source file");
        let parsed = syn::parse_file(&source).unwrap_or_else(|e| panic!("{}: {e}", file.display()));
        let mut functions = Functions { found: Vec::new() };
        functions.visit_file(&parsed);
        let path = file.strip_prefix(root).unwrap_or(&file).display().to_string();
        for (name, lines) in functions.found {
            let named = format!("{path}::{name}");
            if lines > MAX_LINES && !ALLOWED.iter().any(|(allowed, _)| *allowed == named) {
                long.push(format!("{path}: {name} ({lines} lines)"));
            }
        }
    }
    long.sort();
    assert!(long.is_empty(), "{} functions over {MAX_LINES} lines:\n  {}", long.len(), long.join("\n  "));
}

#[test]
fn the_count_sees_a_long_function_and_skips_tests() {
    let body = "    let x = 1;\n".repeat(MAX_LINES);
    let source = format!(
        "fn long() {{\n{body}}}\nfn short() {{}}\n#[cfg(test)]\nmod tests {{ fn long_test() {{\n{body}}} }}\n#[test]\nfn t() {{\n{body}}}"
    );
    let mut functions = Functions { found: Vec::new() };
    functions.visit_file(&syn::parse_file(&source).expect("parses"));
    assert_eq!(functions.found, [("long".to_string(), MAX_LINES + 2), ("short".to_string(), 1)]);
}
