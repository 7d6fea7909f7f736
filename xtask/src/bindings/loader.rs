//! Loader tables: the function tables and the shims that call through them.

use super::*;

// ---------------------------------------------------------------------------------------------
// Emitting the loader tables and the shims

pub(super) fn loader_items(lib: &Lib, functions: &[Function]) -> TokenStream {
    let n = functions.len();
    let id = format_ident!("{}", lib.id);
    let infos = functions.iter().map(|f| {
        let name = cstr(&f.name);
        let symbol = cstr(&f.symbol);
        let ptds = match &f.ptds_symbol {
            Some(s) => {
                let s = cstr(s);
                quote!(Some(#s))
            }
            None => quote!(None),
        };
        let (version, min_version, ptds_version, versioned) = (f.version, f.min_version, f.ptds_version, f.versioned);
        quote! {
            crate::loader::FnInfo {
                name: #name,
                symbol: #symbol,
                ptds_symbol: #ptds,
                version: #version,
                min_version: #min_version,
                ptds_version: #ptds_version,
                versioned: #versioned,
            }
        }
    });
    quote! {
        /// Every function of this module, in the order of the loader's slots.
        pub static FUNCTIONS: [crate::loader::FnInfo; #n] = [#(#infos),*];
        static SLOTS: [::core::sync::atomic::AtomicPtr<::core::ffi::c_void>; #n] =
            [const { ::core::sync::atomic::AtomicPtr::new(::core::ptr::null_mut()) }; #n];
        /// The library these functions are loaded from, resolved on first use.
        pub static LIBRARY: crate::loader::Library =
            crate::loader::Library::new(crate::loader::LibraryId::#id, &FUNCTIONS, &SLOTS);
    }
}

pub(super) fn cstr(s: &str) -> proc_macro2::Literal {
    proc_macro2::Literal::c_string(&std::ffi::CString::new(s).unwrap())
}

pub(super) fn shim(lib: &Lib, f: &Function, index: usize, header: &str) -> TokenStream {
    let name = format_ident!("{}", f.name);
    let attrs = &f.attrs;
    let params = f.inputs.iter().map(|(n, t)| quote!(#n: #t));
    let types = f.inputs.iter().map(|(_, t)| t);
    let args = f.inputs.iter().map(|(n, _)| n);
    let ret = f.output.as_ref().map(|t| quote!(#t)).unwrap_or_else(|| quote!(()));
    let returns_status = lib
        .status
        .map(|s| {
            f.output
                .as_ref()
                .is_some_and(|t| last_ident(t).as_deref() == Some(s.ret))
        })
        .unwrap_or(false);
    let load = quote! { crate::loader::load(&SLOTS[#index], &LIBRARY, #index) };
    let fn_ty = quote! { unsafe extern "C" fn(#(#types),*) -> #ret };
    let mut body_doc = String::new();
    if f.declared != f.name {
        body_doc.push_str(&format!(" The header declares this function as `{}`.\n", f.declared));
    }
    let loading_doc = if returns_status {
        format!(
            " # Loading\n\n The function is resolved on first call. If the library or the function cannot be \
             loaded, it returns an error code outside the range the headers define; `.result()` on it gives \
             an error that says what was missing and what to do (see [`crate::LoadError`]).\n{body_doc}"
        )
    } else {
        format!(
            " # Loading\n\n The function is resolved on first call; `Err` says what could not be loaded and \
             what to do (see [`crate::LoadError`]).\n{body_doc}"
        )
    };
    let safety = format!(
        " # Safety\n\n This calls the C function `{}` of `{header}` directly: the caller must meet its contract \
         as the documentation above and NVIDIA's describe. Every pointer must be valid for the reads and writes \
         the function makes, handles must be live, and the call must respect the library's threading rules.",
        f.declared
    );
    let transmute = safety_marker(&pointer_safety(lib, f, header));
    let call = safety_marker(&format!(
        "the caller meets the contract of `{}` from `{header}`, as this function's `# Safety` requires, and the \
         arguments go unchanged to a pointer of exactly that C signature (see above).",
        f.declared
    ));
    let mut out = if returns_status {
        quote! {
            #(#attrs)*
            #[doc = ""]
            #[doc = #loading_doc]
            #[doc = #safety]
            #[inline]
            pub unsafe fn #name(#(#params),*) -> #ret {
                match #load {
                    Ok(__cuda_sys_fn) => {
                        #transmute
                        let __cuda_sys_fn = unsafe { ::core::mem::transmute::<*mut ::core::ffi::c_void, #fn_ty>(__cuda_sys_fn) };
                        #call
                        unsafe { __cuda_sys_fn(#(#args),*) }
                    }
                    Err(e) => crate::loader::StatusCode::from_load_error(e),
                }
            }
        }
    } else {
        quote! {
            #(#attrs)*
            #[doc = ""]
            #[doc = #loading_doc]
            #[doc = #safety]
            #[inline]
            pub unsafe fn #name(#(#params),*) -> ::core::result::Result<#ret, crate::LoadError> {
                let __cuda_sys_fn = #load?;
                #transmute
                let __cuda_sys_fn = unsafe { ::core::mem::transmute::<*mut ::core::ffi::c_void, #fn_ty>(__cuda_sys_fn) };
                #call
                let __cuda_sys_ret = unsafe { __cuda_sys_fn(#(#args),*) };
                Ok(__cuda_sys_ret)
            }
        }
    };
    if f.declared != f.name {
        let declared = format_ident!("{}", f.declared);
        let doc = format!(" `{}`, the name the header's macros give [`{}`].", f.declared, f.name);
        out.extend(quote! {
            #[doc = #doc]
            pub use self::#name as #declared;
        });
    }
    out
}

/// Why the pointer `load` hands a shim may be transmuted to the shim's function type: what the
/// loader asked for (`crate::loader::Library::resolve`), and what the generator checked about it.
pub(super) fn pointer_safety(lib: &Lib, f: &Function, header: &str) -> String {
    match lib.resolve {
        Resolve::Driver => {
            let newest = f.version.max(f.ptds_version);
            let asked = if f.min_version == newest {
                format!("for version {newest}")
            } else {
                format!("for a version from {} to {newest}", f.min_version)
            };
            let ptds = if f.ptds_version != 0 {
                format!(
                    " (the per-thread-default-stream variant of {} included)",
                    f.ptds_version
                )
            } else {
                String::new()
            };
            format!(
                "`load` returns `Ok` only with the non-null address cuGetProcAddress_v2 gave for `{sym}` when asked \
                 {asked}; the loader never asks below {min} and the driver hands out its newest variant not newer \
                 than the version asked for. The generator checked that every `PFN_{sym}_v*` typedef of \
                 {typedefs} from {min} to {newest}{ptds} has the signature `{header}` declares for `{declared}`, \
                 so the address is a C function of exactly this type.",
                sym = f.symbol,
                typedefs = f.typedefs,
                min = f.min_version,
                declared = f.declared,
            )
        }
        Resolve::Symbol => {
            let mut also = String::new();
            if let Some(ptds) = &f.ptds_symbol {
                also.push_str(&format!(
                    " (or for `{ptds}`, its per-thread-default-stream twin with the same signature)"
                ));
            }
            if f.versioned {
                also.push_str(&format!(
                    " (or for a version-tagged `__{}_<major>_<minor>`, the same function under the name old \
                     libraries export)",
                    f.symbol
                ));
            }
            format!(
                "`load` returns `Ok` only with the non-null address `dlsym` gave for `{}`{also} in {}; that \
                 export is the function `{header}` declares as `{}`, with exactly this signature, so the address \
                 is a C function of this type.",
                f.symbol, lib.library, f.declared
            )
        }
    }
}
