//! Writing the rest of the generated code: device properties, status tables, doc comments.

use super::*;

// ---------------------------------------------------------------------------------------------
// Device properties for cuda-core: one accessor per CU_DEVICE_ATTRIBUTE_*

/// The constants of a newtype enum with their doc text, in declaration order.
pub(super) fn enum_constants(file: &syn::File, enum_type: &str) -> Vec<(String, String)> {
    let mut out = Vec::new();
    for item in &file.items {
        let syn::Item::Impl(imp) = item else { continue };
        if last_ident(&imp.self_ty).as_deref() != Some(enum_type) {
            continue;
        }
        for ii in &imp.items {
            if let syn::ImplItem::Const(c) = ii {
                out.push((c.ident.to_string(), doc_text(&c.attrs)));
            }
        }
    }
    out
}

/// The header's prose with bare URLs made into links (`<https://...>`), which rustdoc wants.
pub(super) fn link_urls(doc: &str) -> String {
    doc.split(' ')
        .map(|word| match word.find("https://").or_else(|| word.find("http://")) {
            Some(start) => {
                let end = word.trim_end_matches(['.', ',', ';', ')']).len().max(start);
                format!("{}<{}>{}", &word[..start], &word[start..end], &word[end..])
            }
            None => word.to_string(),
        })
        .collect::<Vec<_>>()
        .join(" ")
}

pub(super) fn device_properties(attributes: &[(String, String)]) -> Result<String> {
    let mut methods = TokenStream::new();
    let mut all = Vec::new();
    let mut seen = BTreeSet::new();
    for (name, doc) in attributes {
        let Some(short) = name.strip_prefix("CU_DEVICE_ATTRIBUTE_") else {
            continue;
        };
        // The enum's end marker, and aliases kept for old code, are not attributes of their own.
        if short == "MAX" || doc.to_lowercase().starts_with("deprecated") {
            continue;
        }
        let method = short.to_lowercase();
        if !seen.insert(method.clone()) {
            continue;
        }
        let ident = format_ident!("{}", method);
        let constant = format_ident!("{}", name);
        let doc = link_urls(doc.trim_start_matches('<').trim());
        let doc = format!(" {doc} (`{name}`).");
        methods.extend(quote! {
            #[doc = #doc]
            pub fn #ident(&self) -> crate::Result<i32> {
                self.get(cuda_sys::driver::CUdevice_attribute::#constant)
            }
        });
        all.push(quote!((#method, cuda_sys::driver::CUdevice_attribute::#constant)));
    }
    if all.len() < 100 {
        return Err(format!(
            "only {} device attributes found in the driver bindings",
            all.len()
        ));
    }
    let tokens = quote! {
        impl crate::device::DeviceProperties {
            #methods
            /// Every attribute: its property name and the driver's constant.
            pub const ALL: &'static [(&'static str, cuda_sys::driver::CUdevice_attribute)] = &[#(#all),*];
        }
    };
    let file: syn::File = syn::parse2(tokens).map_err(|e| format!("device properties do not parse: {e}"))?;
    Ok(format!("{HEADER_LINE}{}", prettyplease::unparse(&file)))
}

// ---------------------------------------------------------------------------------------------
// Status tables

pub(super) struct StatusValue {
    pub(super) value: i64,
    pub(super) name: String,
    pub(super) description: String,
}

pub(super) fn status_values(file: &syn::File, status: Status) -> Result<Vec<StatusValue>> {
    let mut values = Vec::new();
    for item in &file.items {
        let syn::Item::Impl(imp) = item else { continue };
        if last_ident(&imp.self_ty).as_deref() != Some(status.enum_type) {
            continue;
        }
        for ii in &imp.items {
            let syn::ImplItem::Const(c) = ii else { continue };
            let syn::Expr::Call(call) = &c.expr else { continue };
            let Some(arg) = call.args.first() else { continue };
            let value = match arg {
                syn::Expr::Lit(syn::ExprLit {
                    lit: syn::Lit::Int(i), ..
                }) => i.base10_parse::<i64>().ok(),
                syn::Expr::Unary(syn::ExprUnary {
                    op: syn::UnOp::Neg(_),
                    expr,
                    ..
                }) => match &**expr {
                    syn::Expr::Lit(syn::ExprLit {
                        lit: syn::Lit::Int(i), ..
                    }) => i.base10_parse::<i64>().ok().map(|v| -v),
                    _ => None,
                },
                _ => None,
            };
            let Some(value) = value else { continue };
            let name = c.ident.to_string();
            let doc = doc_text(&c.attrs);
            let description = if doc.is_empty() {
                humanize(&name, status.prefix)
            } else {
                doc
            };
            values.push(StatusValue {
                value,
                name,
                description,
            });
        }
    }
    if values.is_empty() {
        return Err(format!("no values found for status enum {}", status.enum_type));
    }
    values.sort_by_key(|v| v.value);
    values.dedup_by_key(|v| v.value);
    Ok(values)
}

pub(super) fn status_items(status: Status, values: &[StatusValue]) -> TokenStream {
    let enum_type = format_ident!("{}", status.enum_type);
    let rows = values.iter().map(|v| {
        let value = v.value;
        let (name, description) = (&v.name, &v.description);
        quote!(crate::error::StatusInfo { value: #value, name: #name, description: #description })
    });
    let doc = format!(
        " Name and description of every `{}` value the headers list, sorted by value.",
        status.ret
    );
    quote! {
        #[doc = #doc]
        pub static STATUS_VALUES: &[crate::error::StatusInfo] = &[#(#rows),*];
        impl #enum_type {
            /// The value's name in the header (`None` for a value the headers do not list).
            pub fn name(self) -> Option<&'static str> {
                crate::error::StatusInfo::find(STATUS_VALUES, self.0 as i64).map(|s| s.name)
            }
            /// The header's description of the value (`None` for a value the headers do not list).
            pub fn description(self) -> Option<&'static str> {
                crate::error::StatusInfo::find(STATUS_VALUES, self.0 as i64).map(|s| s.description)
            }
        }
    }
}

pub(super) fn doc_text(attrs: &[syn::Attribute]) -> String {
    let mut text = String::new();
    for attr in attrs {
        if let syn::Meta::NameValue(nv) = &attr.meta {
            if nv.path.is_ident("doc") {
                if let syn::Expr::Lit(syn::ExprLit {
                    lit: syn::Lit::Str(s), ..
                }) = &nv.value
                {
                    text.push_str(&s.value());
                    text.push(' ');
                }
            }
        }
    }
    text.split_whitespace().collect::<Vec<_>>().join(" ")
}

/// `NVRTC_ERROR_OUT_OF_MEMORY` -> `out of memory`, for headers that document no value.
pub(super) fn humanize(name: &str, prefix: &str) -> String {
    let tail = name.strip_prefix(prefix).unwrap_or(name);
    let tail = tail
        .trim_start_matches("NVRTC_")
        .trim_start_matches("NVJITLINK_")
        .trim_start_matches("NVVM_");
    // NCCL's names are camel case (`ncclUnhandledCudaError`): one word per capital.
    let tail = if prefix == "nccl" {
        let mut spaced = String::new();
        for (i, c) in tail.char_indices() {
            if i > 0 && c.is_ascii_uppercase() {
                spaced.push(' ');
            }
            spaced.push(c);
        }
        spaced
    } else {
        tail.to_string()
    };
    let words = tail.replace('_', " ").to_lowercase();
    if words.is_empty() {
        name.to_string()
    } else {
        words
    }
}

// ---------------------------------------------------------------------------------------------
// Doc comments: Doxygen to something rustdoc renders, with no accidental doctests

pub(super) fn tidy_docs(item: &mut syn::Item) {
    struct Tidy;
    impl VisitMut for Tidy {
        fn visit_attribute_mut(&mut self, attr: &mut syn::Attribute) {
            if let syn::Meta::NameValue(nv) = &mut attr.meta {
                if nv.path.is_ident("doc") {
                    if let syn::Expr::Lit(syn::ExprLit {
                        lit: syn::Lit::Str(s), ..
                    }) = &mut nv.value
                    {
                        *s = syn::LitStr::new(&tidy_doc(&s.value()), Span::call_site());
                    }
                }
            }
        }
    }
    Tidy.visit_item_mut(item);
}

pub(super) fn tidy_doc(doc: &str) -> String {
    let mut out = Vec::new();
    let mut in_code = false;
    // `\code` may end a line of prose; give each marker a line of its own.
    let doc = doc
        .replace("\\code", "\n\\code\n")
        .replace("\\endcode", "\n\\endcode\n");
    for line in doc.lines() {
        let trimmed = line.trim();
        if trimmed.starts_with("\\code") {
            in_code = true;
            out.push(" ```text".to_string());
            continue;
        }
        if trimmed.starts_with("\\endcode") {
            in_code = false;
            while out.last().is_some_and(|l: &String| l.trim().is_empty()) {
                out.pop();
            }
            out.push(" ```".to_string());
            continue;
        }
        if in_code {
            if trimmed.is_empty() && out.last().is_some_and(|l| l == " ```text") {
                continue;
            }
            out.push(format!(" {line}"));
            continue;
        }
        // Indentation would make rustdoc read a code block (and a doctest); the headers indent
        // for layout only.
        let mut text = trimmed.to_string();
        for (from, to) in [
            ("\\brief ", ""),
            ("\\param ", "- parameter "),
            ("\\return ", "Returns: "),
            ("\\returns ", "Returns: "),
            ("\\note ", "Note: "),
            ("\\notefnerr", ""),
            ("\\note_sync", ""),
            ("\\note_null_stream", ""),
            ("\\sa ", "See also: "),
            ("\\deprecated", "Deprecated."),
        ] {
            text = text.replace(from, to);
        }
        if text.starts_with("```") {
            text = format!("`{text}`");
        }
        out.push(if text.is_empty() {
            String::new()
        } else {
            format!(" {text}")
        });
    }
    if in_code {
        out.push(" ```".to_string());
    }
    out.join("\n")
}
