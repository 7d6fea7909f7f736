//! Header parsing: which functions each library declares, their driver versions and symbols.

use super::*;

// ---------------------------------------------------------------------------------------------
// The driver: base names and versions from cudaTypedefs.h

/// One `PFN_<base>_v<version>[_ptds|_ptsz]` typedef.
pub(super) struct Pfn {
    pub(super) version: u32,
    pub(super) ptds: bool,
    pub(super) signature: String,
}

pub(super) fn driver_functions(
    include: &Path,
    main: &syn::File,
    declared: Vec<syn::ForeignItemFn>,
) -> Result<Vec<Function>> {
    // A second parse sees every PFN typedef, the ones the typedef headers keep behind
    // __CUDA_API_VERSION_INTERNAL included (older ABIs, needed to know where a signature changed).
    let mut typedef_texts = Vec::new();
    let mut internal = String::new();
    for header in DRIVER_TYPEDEF_HEADERS {
        let text = util::read(&include.join(header))?;
        // cudaTypedefs.h and the GL and VDPAU ones have such a block; the others need none.
        if *header == "cudaTypedefs.h" || text.contains(INTERNAL_BLOCK) {
            internal.push_str(&internal_typedefs(header, &text)?);
            internal.push('\n');
        }
        typedef_texts.push((*header, text));
    }
    let legacy = legacy_declarations(&util::read(&include.join("cuda.h"))?)?;
    let includes: String = DRIVER_TYPEDEF_HEADERS
        .iter()
        .map(|h| format!("#include <{h}>\n"))
        .collect();
    let wrapper = format!("{includes}{legacy}\n{internal}");
    let mut analysis_files = DRIVER_HEADERS.to_vec();
    analysis_files.push("cuda_sys_wrapper.h");
    let analysis = run_bindgen(bindgen_builder(include, &wrapper, &analysis_files), "driver typedefs")?;

    let mut aliases: HashMap<String, syn::Type> = HashMap::new();
    for item in main.items.iter().chain(analysis.items.iter()) {
        if let syn::Item::Type(t) = item {
            aliases.insert(t.ident.to_string(), (*t.ty).clone());
        }
    }
    let pfn_name = regex::Regex::new(r"^PFN_(\w+?)_v(\d+)(_ptds|_ptsz)?$").unwrap();
    let mut pfns: BTreeMap<String, Vec<Pfn>> = BTreeMap::new();
    for item in &analysis.items {
        let syn::Item::Type(t) = item else { continue };
        let name = t.ident.to_string();
        let Some(cap) = pfn_name.captures(&name) else { continue };
        let Some(bare) = bare_fn_of(&t.ty) else {
            return Err(format!("{name} is not an optional function pointer"));
        };
        let signature = canonical_fn(
            &bare.inputs.iter().map(|a| a.ty.clone()).collect::<Vec<_>>(),
            output_type(&bare.output),
            &aliases,
        );
        let base = cap[1].to_string();
        pfns.entry(base.clone()).or_default().push(Pfn {
            version: cap[2].parse().unwrap(),
            ptds: cap.get(3).is_some(),
            signature,
        });
    }

    // `#define cuMemAlloc cuMemAlloc_v2`, `#define cuMemcpyHtoD __CUDA_API_PTDS(cuMemcpyHtoD_v2)`:
    // users call the macro's name.
    let rename =
        regex::Regex::new(r"(?m)^\s*#\s*define\s+(cu\w+)\s+(?:__CUDA_API_PT(?:DS|SZ)\()?(cu\w+)\)?\s*$").unwrap();
    let mut public_of: HashMap<String, String> = HashMap::new();
    for header in DRIVER_DECLARING_HEADERS {
        let text = util::read(&include.join(header))?;
        for c in rename.captures_iter(&text).filter(|c| c[1] != c[2]) {
            public_of.insert(c[2].to_string(), c[1].to_string());
        }
    }
    let mut functions = Vec::new();
    let version_suffix = regex::Regex::new(r"^(\w+?)_v(\d+)$").unwrap();
    for f in declared {
        let declared_name = f.sig.ident.to_string();
        let (base, ordinal) = if pfns.contains_key(&declared_name) {
            (declared_name.clone(), 1)
        } else if let Some((stripped, ordinal)) = version_suffix
            .captures(&declared_name)
            .map(|c| (c[1].to_string(), c[2].parse::<usize>().unwrap_or(0)))
            .filter(|(b, _)| pfns.contains_key(b))
        {
            (stripped, ordinal)
        } else {
            return Err(format!(
                "{declared_name} is declared but no PFN_{declared_name}_v<N> typedef gives its version"
            ));
        };
        let inputs = inputs_of(&f.sig)?;
        let output = output_type(&f.sig.output);
        let signature = canonical_fn(
            &inputs.iter().map(|(_, t)| t.clone()).collect::<Vec<_>>(),
            output.clone(),
            &aliases,
        );
        let (version, min_version, ptds_version) = driver_versions(&declared_name, ordinal, &signature, &pfns[&base])?;
        let pfn = format!("PFN_{base}_v");
        let typedefs = typedef_texts
            .iter()
            .find(|(_, text)| text.contains(&pfn))
            .map(|(header, _)| *header)
            .ok_or_else(|| format!("{declared_name}: no typedef header names {pfn}<N>"))?;
        functions.push(Function {
            name: public_of
                .get(&declared_name)
                .cloned()
                .unwrap_or_else(|| declared_name.clone()),
            symbol: base,
            declared: declared_name,
            ptds_symbol: None,
            version,
            min_version,
            ptds_version,
            versioned: false,
            typedefs,
            attrs: f.attrs.iter().filter(|a| a.path().is_ident("doc")).cloned().collect(),
            inputs,
            output,
        });
    }

    Ok(functions)
}

/// The version whose ABI a declaration binds, the oldest version from which every variant up to
/// that one has the same signature, and the version of the matching per-thread-default-stream
/// variant (0 if none). See "Resolving driver functions" in docs/architecture.md.
///
/// The header names ABI variants `cuX`, `cuX_v2`, `cuX_v3`, ...; cudaTypedefs.h lists one
/// `PFN_cuX_v<version>` per variant, oldest first. So variant `_vK` is the K-th typedef, and its
/// signature must be the declared one (checked). Signatures alone cannot tell the variants apart:
/// `cuGraphAddNode_v2` (12030) and `cuGraphAddNode_v3` (13040) have the same one.
pub(super) fn driver_versions(
    declared: &str,
    ordinal: usize,
    signature: &str,
    pfns: &[Pfn],
) -> Result<(u32, u32, u32)> {
    let mut plain: Vec<&Pfn> = pfns.iter().filter(|p| !p.ptds).collect();
    plain.sort_by_key(|p| p.version);
    let known = || -> String {
        plain
            .iter()
            .map(|p| format!("v{}: {}", p.version, p.signature))
            .collect::<Vec<_>>()
            .join("\n  ")
    };
    let Some(bound) = ordinal.checked_sub(1).filter(|i| *i < plain.len()) else {
        return Err(format!(
            "{declared}: variant {ordinal} but only {} PFN_ typedefs\n  {}",
            plain.len(),
            known()
        ));
    };
    if plain[bound].signature != signature {
        return Err(format!(
            "{declared}: the typedef of variant {ordinal} has another signature\n  declared: {signature}\n  {}",
            known()
        ));
    }
    let mut floor = bound;
    while floor > 0 && plain[floor - 1].signature == signature {
        floor -= 1;
    }
    let ptds_version = pfns
        .iter()
        // the per-thread twin of this variant: same signature, older than the next variant
        .filter(|p| p.ptds && p.signature == signature)
        .map(|p| p.version)
        .filter(|v| plain.get(bound + 1).is_none_or(|next| *v < next.version))
        .max()
        .unwrap_or(0);
    Ok((plain[bound].version, plain[floor].version, ptds_version))
}

/// The legacy types and declarations cuda.h keeps at its end inside
/// `#if defined(__CUDA_API_VERSION_INTERNAL)` (the block `#undef`s the ABI macros first, so it
/// can follow the public part). The old `PFN_` typedefs refer to these types.
pub(super) fn legacy_declarations(cuda_h: &str) -> Result<String> {
    let marker = "#if defined(__CUDA_API_VERSION_INTERNAL)\n";
    let start = cuda_h
        .rfind(marker)
        .ok_or("cuda.h: no __CUDA_API_VERSION_INTERNAL block")?
        + marker.len();
    let block = &cuda_h[start..];
    let end = block
        .find("\n#elif")
        .or_else(|| block.find("\n#endif"))
        .ok_or("cuda.h: unterminated __CUDA_API_VERSION_INTERNAL block")?;
    let block = &block[..end];
    if block.lines().any(|l| {
        let t = l.trim_start();
        t.starts_with('#') && !t.starts_with("#undef")
    }) {
        return Err("cuda.h: preprocessor lines inside the legacy block; the generator must learn them".into());
    }
    Ok(block.to_string())
}

/// How the typedef headers open the block of older ABIs.
pub(super) const INTERNAL_BLOCK: &str = "#if defined(__CUDA_API_VERSION_INTERNAL)";

/// The typedef lines a typedef header (`cudaTypedefs.h`, `cudaGLTypedefs.h`, ...) keeps inside
/// `#if defined(__CUDA_API_VERSION_INTERNAL)`.
pub(super) fn internal_typedefs(header: &str, text: &str) -> Result<String> {
    let start = text
        .find(INTERNAL_BLOCK)
        .ok_or_else(|| format!("{header}: no __CUDA_API_VERSION_INTERNAL block"))?;
    let block = &text[start..];
    let end = block
        .find("\n#endif")
        .ok_or_else(|| format!("{header}: unterminated __CUDA_API_VERSION_INTERNAL block"))?;
    let lines: Vec<&str> = block[..end]
        .lines()
        .skip(1)
        .filter(|l| l.trim_start().starts_with("typedef"))
        .collect();
    if block[..end].lines().skip(1).any(|l| l.trim_start().starts_with('#')) {
        return Err(format!(
            "{header}: preprocessor lines inside the __CUDA_API_VERSION_INTERNAL block; the generator must learn them"
        ));
    }
    Ok(lines.join("\n"))
}

pub(super) fn bare_fn_of(ty: &syn::Type) -> Option<syn::TypeBareFn> {
    // Option<unsafe extern "C" fn(..) -> ..>
    let syn::Type::Path(p) = ty else { return None };
    let seg = p.path.segments.last()?;
    if seg.ident != "Option" {
        return None;
    }
    let syn::PathArguments::AngleBracketed(args) = &seg.arguments else {
        return None;
    };
    match args.args.first()? {
        syn::GenericArgument::Type(syn::Type::BareFn(f)) => Some(f.clone()),
        _ => None,
    }
}

pub(super) fn output_type(output: &syn::ReturnType) -> Option<syn::Type> {
    match output {
        syn::ReturnType::Default => None,
        syn::ReturnType::Type(_, t) => Some((**t).clone()),
    }
}

/// A signature with every type alias expanded, as a string: two typedefs with the same string have
/// the same ABI whatever their aliases are called (`CUdevice` and `CUdevice_v1` are both `c_int`).
pub(super) fn canonical_fn(
    inputs: &[syn::Type],
    output: Option<syn::Type>,
    aliases: &HashMap<String, syn::Type>,
) -> String {
    struct Expand<'a>(&'a HashMap<String, syn::Type>, u32);
    impl VisitMut for Expand<'_> {
        fn visit_type_mut(&mut self, ty: &mut syn::Type) {
            if let syn::Type::Path(p) = ty {
                if p.qself.is_none() && p.path.segments.len() == 1 {
                    let name = p.path.segments[0].ident.to_string();
                    if let Some(target) = self.0.get(&name) {
                        if self.1 < 64 {
                            *ty = target.clone();
                            self.1 += 1;
                            self.visit_type_mut(ty);
                            self.1 -= 1;
                            return;
                        }
                    }
                }
            }
            syn::visit_mut::visit_type_mut(self, ty);
        }
    }
    let mut parts = Vec::new();
    for ty in inputs.iter().cloned().chain(output) {
        let mut ty = ty;
        Expand(aliases, 0).visit_type_mut(&mut ty);
        parts.push(quote!(#ty).to_string());
    }
    parts.join(" | ")
}

pub(super) fn inputs_of(sig: &syn::Signature) -> Result<Vec<(syn::Ident, syn::Type)>> {
    sig.inputs
        .iter()
        .enumerate()
        .map(|(i, arg)| match arg {
            syn::FnArg::Typed(pt) => {
                let name = match &*pt.pat {
                    syn::Pat::Ident(id) => id.ident.clone(),
                    _ => format_ident!("arg{}", i),
                };
                Ok((name, (*pt.ty).clone()))
            }
            syn::FnArg::Receiver(_) => Err(format!("{}: unexpected receiver", sig.ident)),
        })
        .collect()
}

// ---------------------------------------------------------------------------------------------
// Libraries resolved by symbol

pub(super) fn symbol_functions(headers: &[String], declared: Vec<syn::ForeignItemFn>) -> Result<Vec<Function>> {
    let declared_names: BTreeSet<String> = declared.iter().map(|f| f.sig.ident.to_string()).collect();
    // `#define cudaGetDeviceProperties cudaGetDeviceProperties_v2`: users call the macro name.
    let rename = regex::Regex::new(r"(?m)^\s*#\s*define\s+(\w+)\s+(\w+)\s*(?://.*)?$").unwrap();
    // `#define cudaMemcpy __CUDART_API_PTDS(cudaMemcpy)`: the runtime's per-thread variants.
    let ptds = regex::Regex::new(r"(?m)^\s*#\s*define\s+(\w+)\s+__CUDART_API_PT(DS|SZ)\((\w+)\)").unwrap();
    let versioned = regex::Regex::new(r"^__(\w+)_\d+_\d+$").unwrap();
    let mut public_of: HashMap<String, String> = HashMap::new();
    let mut ptds_of: HashMap<String, String> = HashMap::new();
    for text in headers {
        for cap in rename.captures_iter(text) {
            // A macro that renames onto a name also declared as a function of its own (cuFile's
            // `cuFileDriverClose` and `cuFileDriverClose_v2`) leaves both under their own names.
            if declared_names.contains(&cap[2]) && cap[1] != cap[2] && !declared_names.contains(&cap[1]) {
                public_of.insert(cap[2].to_string(), cap[1].to_string());
            }
        }
        for cap in ptds.captures_iter(text) {
            let suffix = if &cap[2] == "DS" { "_ptds" } else { "_ptsz" };
            ptds_of.insert(cap[3].to_string(), format!("{}{suffix}", &cap[3]));
        }
    }
    let mut functions = Vec::new();
    for f in declared {
        let declared_name = f.sig.ident.to_string();
        let (name, symbol, is_versioned) = if let Some(cap) = versioned.captures(&declared_name) {
            // nvJitLink declares `__nvJitLinkCreate_13_5` behind a static inline `nvJitLinkCreate`;
            // the library exports the plain name too (since 12.3), and the tagged one of its version.
            (cap[1].to_string(), cap[1].to_string(), true)
        } else if let Some(public) = public_of.get(&declared_name) {
            (public.clone(), declared_name.clone(), false)
        } else {
            (declared_name.clone(), declared_name.clone(), false)
        };
        let inputs = inputs_of(&f.sig)?;
        functions.push(Function {
            ptds_symbol: ptds_of.get(&declared_name).cloned(),
            name,
            symbol,
            declared: declared_name,
            version: 0,
            min_version: 0,
            ptds_version: 0,
            versioned: is_versioned,
            typedefs: "",
            attrs: f.attrs.iter().filter(|a| a.path().is_ident("doc")).cloned().collect(),
            inputs,
            output: output_type(&f.sig.output),
        });
    }
    Ok(functions)
}
