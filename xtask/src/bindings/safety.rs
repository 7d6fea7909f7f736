//! Writing SAFETY comments into the generated code, and checking every `unsafe` has one.

use super::*;

// ---------------------------------------------------------------------------------------------
// SAFETY comments in the generated code
//
// Comments do not survive `quote!` and prettyplease, so every `unsafe {}` block the generated code
// has gets a marker statement `__cuda_sys_safety!("why it is sound");` right before the
// statement holding it; after prettyplease, `expand_safety_markers` turns each marker into a
// `// SAFETY:` comment. `check_unsafe_documented` makes sure no block is left without one, so
// clippy's `undocumented_unsafe_blocks` (on for cuda-sys) has nothing to find; a new kind of
// unsafe block from bindgen (a newer version, or headers with bitfields) stops the generator
// until it learns to explain it.

pub(super) const SAFETY_MARKER: &str = "__cuda_sys_safety";

pub(super) fn safety_marker(text: &str) -> TokenStream {
    let marker = format_ident!("{}", SAFETY_MARKER);
    quote! { #marker!(#text); }
}

pub(super) fn is_safety_marker(stmt: &syn::Stmt) -> bool {
    matches!(stmt, syn::Stmt::Macro(m) if m.mac.path.is_ident(SAFETY_MARKER))
}

/// Counts the `unsafe {}` blocks of an expression or statement, not looking into nested blocks
/// (whose statements are checked on their own).
#[derive(Default)]
pub(super) struct CountUnsafe(pub(super) usize);

impl VisitMut for CountUnsafe {
    fn visit_expr_unsafe_mut(&mut self, _: &mut syn::ExprUnsafe) {
        self.0 += 1;
    }
    fn visit_block_mut(&mut self, _: &mut syn::Block) {}
    fn visit_item_mut(&mut self, _: &mut syn::Item) {}
}

/// Every `unsafe {}` block in `file` must sit in a statement right after a marker, one block per
/// statement, and every marker must precede such a statement.
pub(super) fn check_unsafe_documented(module: &str, file: &syn::File) -> Result {
    struct Check {
        undocumented: Vec<String>,
        stray_markers: usize,
        blocks: usize,
        documented: usize,
    }
    impl VisitMut for Check {
        fn visit_expr_unsafe_mut(&mut self, e: &mut syn::ExprUnsafe) {
            self.blocks += 1;
            syn::visit_mut::visit_expr_unsafe_mut(self, e);
        }
        fn visit_block_mut(&mut self, block: &mut syn::Block) {
            let mut after_marker = false;
            for stmt in &mut block.stmts {
                if is_safety_marker(stmt) {
                    if after_marker {
                        self.stray_markers += 1;
                    }
                    after_marker = true;
                    continue;
                }
                // Items in a block (nested functions) are visited on their own: CountUnsafe skips them.
                let mut count = CountUnsafe::default();
                count.visit_stmt_mut(stmt);
                if count.0 > 0 {
                    if after_marker && count.0 == 1 {
                        self.documented += 1;
                    } else {
                        let text = quote!(#stmt).to_string();
                        self.undocumented.push(text.chars().take(160).collect());
                    }
                } else if after_marker {
                    self.stray_markers += 1;
                }
                after_marker = false;
            }
            if after_marker {
                self.stray_markers += 1;
            }
            syn::visit_mut::visit_block_mut(self, block);
        }
    }
    let mut check = Check {
        undocumented: Vec::new(),
        stray_markers: 0,
        blocks: 0,
        documented: 0,
    };
    check.visit_file_mut(&mut file.clone());
    if check.blocks != check.documented && check.undocumented.is_empty() {
        check.undocumented.push(format!(
            "{} unsafe blocks outside a block's statements",
            check.blocks - check.documented
        ));
    }
    if !check.undocumented.is_empty() {
        return Err(format!(
            "{module}: unsafe blocks the generator has no SAFETY comment for (teach xtask/src/bindings.rs why they \
             are sound):\n  {}",
            check.undocumented.join("\n  ")
        ));
    }
    if check.stray_markers > 0 {
        return Err(format!(
            "{module}: {} SAFETY markers are not followed by a statement with one unsafe block",
            check.stray_markers
        ));
    }
    Ok(())
}

/// Replaces each marker statement prettyplease printed with `// SAFETY:` comment lines, wrapped
/// at 100 columns and indented like the statement.
pub(super) fn expand_safety_markers(text: &str) -> Result<String> {
    let marker = regex::Regex::new(&format!(
        r#"(?m)^([ \t]*){SAFETY_MARKER}!\(\s*("(?:[^"\\]|\\.)*")\s*\);[ \t]*\n"#
    ))
    .unwrap();
    let mut failed = None;
    let out = marker.replace_all(text, |cap: &regex::Captures| {
        let indent = &cap[1];
        let why = match syn::parse_str::<syn::LitStr>(&cap[2]) {
            Ok(lit) => lit.value(),
            Err(e) => {
                failed = Some(format!("a SAFETY marker does not parse: {e}"));
                String::new()
            }
        };
        let mut lines = Vec::new();
        let mut line = format!("{indent}// SAFETY:");
        for word in why.split_whitespace() {
            if line.len() + 1 + word.len() > 100 && !line.trim_end().ends_with("//") {
                lines.push(std::mem::replace(&mut line, format!("{indent}//")));
            }
            line.push(' ');
            line.push_str(word);
        }
        lines.push(line);
        lines.join("\n") + "\n"
    });
    if let Some(e) = failed {
        return Err(e);
    }
    if out.contains(SAFETY_MARKER) {
        return Err(format!(
            "a {SAFETY_MARKER}! marker was printed in a shape the generator does not expect"
        ));
    }
    Ok(out.into_owned())
}

/// bindgen's `impl Default` for types it cannot derive `Default` for (unions, long arrays) zeroes
/// the value with `ptr::write_bytes` and `assume_init`. Each gets a SAFETY comment, after checking
/// that every byte zero is a valid value of the type (see [`zero_is_valid`]).
pub(super) fn document_default_impls(module: &str, file: &mut syn::File) -> Result {
    let snapshot = file.clone();
    let types = TypeTable::new(&snapshot);
    for item in &mut file.items {
        let syn::Item::Impl(imp) = item else { continue };
        let is_default = imp
            .trait_
            .as_ref()
            .is_some_and(|(_, path, _)| path.segments.last().is_some_and(|s| s.ident == "Default"));
        if !is_default {
            continue;
        }
        let self_ty = &imp.self_ty;
        let ty_name = quote!(#self_ty).to_string();
        for ii in &mut imp.items {
            let syn::ImplItem::Fn(fun) = ii else { continue };
            let body = {
                let block = &fun.block;
                quote!(#block).to_string().replace(' ', "")
            };
            let stmts = &mut fun.block.stmts;
            let Some(pos) = stmts.iter_mut().position(|s| {
                let mut count = CountUnsafe::default();
                count.visit_stmt_mut(s);
                count.0 > 0
            }) else {
                continue;
            };
            if !body.contains("MaybeUninit::<Self>::uninit()")
                || !body.contains("write_bytes(s.as_mut_ptr(),0,1)")
                || !body.contains("s.assume_init()")
            {
                return Err(format!(
                    "{module}: `impl Default for {ty_name}` has an unsafe block of a shape the generator does not \
                     know: {body}"
                ));
            }
            zero_is_valid(&types, self_ty, &mut Vec::new())
                .map_err(|e| format!("{module}: `impl Default for {ty_name}` zeroes the value, but {e}"))?;
            let why = format!(
                "`{ty_name}` is plain C data: integers, floats, `bool`s, raw pointers, `Option`s of function \
                 pointers, and arrays, structs and unions of those (the generator checked), for all of which every byte zero is \
                 a valid value, as C's `= {{0}}` makes it. `write_bytes` zeroes all of `s`, so `assume_init` reads \
                 an initialised `Self`."
            );
            let marker = safety_marker(&why);
            stmts.insert(pos, syn::parse2(marker).map_err(|e| e.to_string())?);
        }
    }
    Ok(())
}

/// The structs, unions and type aliases bindgen generated, by name.
pub(super) struct TypeTable<'a> {
    pub(super) structs: HashMap<String, Vec<&'a syn::Type>>,
    pub(super) aliases: HashMap<String, &'a syn::Type>,
    /// `use self::X as Y`: Y to X.
    pub(super) renames: HashMap<String, String>,
    pub(super) enums: BTreeSet<String>,
}

impl<'a> TypeTable<'a> {
    pub(super) fn new(file: &'a syn::File) -> Self {
        let mut table = TypeTable {
            structs: HashMap::new(),
            aliases: HashMap::new(),
            renames: HashMap::new(),
            enums: BTreeSet::new(),
        };
        for item in &file.items {
            match item {
                syn::Item::Struct(s) => {
                    table
                        .structs
                        .insert(s.ident.to_string(), s.fields.iter().map(|f| &f.ty).collect());
                }
                syn::Item::Union(u) => {
                    table
                        .structs
                        .insert(u.ident.to_string(), u.fields.named.iter().map(|f| &f.ty).collect());
                }
                syn::Item::Type(t) => {
                    table.aliases.insert(t.ident.to_string(), &t.ty);
                }
                syn::Item::Enum(e) => {
                    table.enums.insert(e.ident.to_string());
                }
                // `pub use self::CUstream_flags_enum as CUstream_flags;`
                syn::Item::Use(u) => {
                    let mut tree = &u.tree;
                    while let syn::UseTree::Path(p) = tree {
                        tree = &p.tree;
                    }
                    if let syn::UseTree::Rename(r) = tree {
                        table.renames.insert(r.rename.to_string(), r.ident.to_string());
                    }
                }
                _ => {}
            }
        }
        table
    }
}

/// Whether the all-zero bit pattern is a valid value of `ty`: true for integers, floats, `bool`,
/// raw pointers (null), `Option` of a function pointer (`None`), and arrays, structs and unions of
/// those; an error names the first type that is not known to be.
pub(super) fn zero_is_valid(types: &TypeTable, ty: &syn::Type, seen: &mut Vec<String>) -> Result {
    const PRIMITIVES: &[&str] = &[
        "c_char",
        "c_schar",
        "c_uchar",
        "c_short",
        "c_ushort",
        "c_int",
        "c_uint",
        "c_long",
        "c_ulong",
        "c_longlong",
        "c_ulonglong",
        "c_float",
        "c_double",
        "i8",
        "i16",
        "i32",
        "i64",
        "i128",
        "isize",
        "u8",
        "u16",
        "u32",
        "u64",
        "u128",
        "usize",
        "f32",
        "f64",
        "bool",
    ];
    match ty {
        syn::Type::Ptr(_) => Ok(()),
        syn::Type::Array(a) => zero_is_valid(types, &a.elem, seen),
        syn::Type::Paren(p) => zero_is_valid(types, &p.elem, seen),
        syn::Type::Group(g) => zero_is_valid(types, &g.elem, seen),
        syn::Type::Path(p) if p.qself.is_none() => {
            let last = p.path.segments.last().ok_or("an empty type path")?;
            let name = last.ident.to_string();
            if name == "Option" {
                if let syn::PathArguments::AngleBracketed(args) = &last.arguments {
                    if let Some(syn::GenericArgument::Type(syn::Type::BareFn(_))) = args.args.first() {
                        return Ok(());
                    }
                }
                return Err(format!("`{}` is not an `Option` of a function pointer", quote!(#ty)));
            }
            if !last.arguments.is_empty() {
                return Err(format!(
                    "the generator does not know whether zero is a valid `{}`",
                    quote!(#ty)
                ));
            }
            if PRIMITIVES.contains(&name.as_str()) {
                return Ok(());
            }
            if seen.contains(&name) {
                return Ok(());
            }
            if types.enums.contains(&name) {
                return Err(format!("`{name}` is a Rust enum, whose zero may not be a variant"));
            }
            seen.push(name.clone());
            if let Some(target) = types.renames.get(&name) {
                let target: syn::Type = syn::parse_str(target).map_err(|e| e.to_string())?;
                return zero_is_valid(types, &target, seen);
            }
            if let Some(fields) = types.structs.get(&name) {
                for field in fields {
                    zero_is_valid(types, field, seen)?;
                }
                return Ok(());
            }
            if let Some(target) = types.aliases.get(&name) {
                return zero_is_valid(types, target, seen);
            }
            Err(format!("the generator does not know whether zero is a valid `{name}`"))
        }
        other => Err(format!(
            "the generator does not know whether zero is a valid `{}`",
            quote!(#other)
        )),
    }
}

pub(super) fn last_ident(ty: &syn::Type) -> Option<String> {
    match ty {
        syn::Type::Path(p) => p.path.segments.last().map(|s| s.ident.to_string()),
        _ => None,
    }
}
