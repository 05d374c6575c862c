//! The shape the code keeps: no function outside tests is longer than [`MAX_FN_LINES`] lines, so
//! a stage of the engine reads as one screenful of steps rather than a chain to scroll through.
//! Every crate of the workspace is read with `syn`; test code (`#[cfg(test)]` modules, inline or
//! in files of their own, `#[test]` functions, integration suites) is not counted.

use std::collections::HashSet;
use std::path::{Path, PathBuf};

use syn::spanned::Spanned;
use syn::visit::Visit;

/// The longest a non-test function may be, its signature and closing brace included.
const MAX_FN_LINES: usize = 150;

/// Whether `attrs` hold `#[test]` or `#[cfg(test)]`.
fn is_test(attrs: &[syn::Attribute]) -> bool {
    attrs.iter().any(|a| {
        a.path().is_ident("test")
            || (a.path().is_ident("cfg") && a.parse_args::<syn::Ident>().is_ok_and(|i| i == "test"))
    })
}

/// The functions of one file longer than the limit, and the files of its `#[cfg(test)] mod x;`.
struct Reader<'a> {
    file: &'a Path,
    /// The workspace, which messages name files from.
    root: &'a Path,
    too_long: Vec<String>,
    test_files: Vec<PathBuf>,
}

impl Reader<'_> {
    fn check(&mut self, attrs: &[syn::Attribute], name: &syn::Ident, span: proc_macro2::Span) {
        let lines = span.end().line - span.start().line + 1;
        if lines > MAX_FN_LINES && !is_test(attrs) {
            let at = span.start().line;
            let file = self.file.strip_prefix(self.root).unwrap_or(self.file);
            let file = file.display();
            self.too_long
                .push(format!("{file}:{at} `{name}` is {lines} lines"));
        }
    }

    /// Where `mod name;` declared in this file keeps its source (`name.rs` or `name/mod.rs`
    /// beside a `lib.rs`, `main.rs` or `mod.rs`, under a directory of the file's own name
    /// otherwise).
    fn module_files(&self, name: &syn::Ident) -> [PathBuf; 2] {
        let dir = self.file.parent().expect("a file in a directory");
        let stem = self.file.file_stem().and_then(|s| s.to_str()).unwrap_or("");
        let dir = match stem {
            "lib" | "main" | "mod" => dir.to_path_buf(),
            own => dir.join(own),
        };
        [
            dir.join(format!("{name}.rs")),
            dir.join(name.to_string()).join("mod.rs"),
        ]
    }
}

impl<'ast> Visit<'ast> for Reader<'_> {
    fn visit_item_fn(&mut self, f: &'ast syn::ItemFn) {
        self.check(&f.attrs, &f.sig.ident, f.span());
        if !is_test(&f.attrs) {
            syn::visit::visit_item_fn(self, f);
        }
    }
    fn visit_impl_item_fn(&mut self, f: &'ast syn::ImplItemFn) {
        self.check(&f.attrs, &f.sig.ident, f.span());
        syn::visit::visit_impl_item_fn(self, f);
    }
    fn visit_trait_item_fn(&mut self, f: &'ast syn::TraitItemFn) {
        if f.default.is_some() {
            self.check(&f.attrs, &f.sig.ident, f.span());
        }
        syn::visit::visit_trait_item_fn(self, f);
    }
    fn visit_item_impl(&mut self, i: &'ast syn::ItemImpl) {
        if !is_test(&i.attrs) {
            syn::visit::visit_item_impl(self, i);
        }
    }
    fn visit_item_mod(&mut self, m: &'ast syn::ItemMod) {
        if !is_test(&m.attrs) {
            return syn::visit::visit_item_mod(self, m);
        }
        if m.content.is_none() {
            let files = self.module_files(&m.ident);
            self.test_files.extend(files);
        }
    }
}

/// Every `.rs` file under `dir`, in a stable order.
fn sources(dir: &Path, out: &mut Vec<PathBuf>) {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    let mut entries: Vec<_> = entries.flatten().map(|e| e.path()).collect();
    entries.sort();
    for path in entries {
        if path.is_dir() {
            sources(&path, out);
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push(path);
        }
    }
}

#[test]
fn no_function_outside_tests_is_longer_than_the_limit() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("..")
        .canonicalize()
        .expect("the workspace");
    let crates = [
        "device",
        "device/abi",
        "device/rtl",
        "driver",
        "host-lib",
        "qemu",
        "qemu/vfio-user-server",
        "xtask",
    ];
    let mut files = Vec::new();
    for c in crates {
        // A crate's `src`, and its build script; never its integration suites.
        sources(&root.join(c).join("src"), &mut files);
        let build = root.join(c).join("build.rs");
        if build.exists() {
            files.push(build);
        }
    }
    assert!(
        files.len() > 100,
        "the workspace's sources: {}",
        files.len()
    );
    let mut test_files = HashSet::new();
    let mut too_long = Vec::new();
    let mut functions_read = 0usize;
    let mut read = Vec::new();
    for file in &files {
        let text = std::fs::read_to_string(file).expect("readable source");
        let tree = syn::parse_file(&text).unwrap_or_else(|e| panic!("{}: {e}", file.display()));
        let mut reader = Reader {
            file,
            root: &root,
            too_long: Vec::new(),
            test_files: Vec::new(),
        };
        reader.visit_file(&tree);
        functions_read += text.matches("fn ").count();
        test_files.extend(reader.test_files);
        read.push((file.clone(), reader.too_long));
    }
    for (file, long) in read {
        if !test_files.contains(&file) {
            too_long.extend(long);
        }
    }
    assert!(functions_read > 1000, "{functions_read} functions read");
    assert!(
        too_long.is_empty(),
        "functions over {MAX_FN_LINES} lines:\n{}",
        too_long.join("\n")
    );
}
