//! `#[derive(DeviceRepr)]`: lets a `#[repr(C)]` struct of plain-data fields be passed to a kernel
//! by value. Use it through `cuda_core::DeviceRepr`.

use proc_macro::TokenStream;
use quote::quote;
use syn::{parse_macro_input, Data, DeriveInput, Fields};

/// Implements `cuda_core::DeviceRepr` for a struct, checking at compile time that it is
/// `#[repr(C)]`, that every field is `DeviceRepr`, and that it has no padding (whose bytes the
/// kernel would read uninitialised).
#[proc_macro_derive(DeviceRepr)]
pub fn derive_device_repr(input: TokenStream) -> TokenStream {
    let input = parse_macro_input!(input as DeriveInput);
    match expand(&input) {
        Ok(tokens) => tokens.into(),
        Err(e) => e.to_compile_error().into(),
    }
}

fn expand(input: &DeriveInput) -> syn::Result<proc_macro2::TokenStream> {
    let name = &input.ident;
    let fields = match &input.data {
        Data::Struct(s) => match &s.fields {
            Fields::Named(f) => f.named.iter().map(|f| f.ty.clone()).collect::<Vec<_>>(),
            Fields::Unnamed(f) => f.unnamed.iter().map(|f| f.ty.clone()).collect(),
            Fields::Unit => Vec::new(),
        },
        _ => {
            return Err(syn::Error::new_spanned(
                name,
                "derive(DeviceRepr) is for structs; enums and unions have no fixed device layout",
            ))
        }
    };
    if !input.generics.params.is_empty() {
        return Err(syn::Error::new_spanned(
            &input.generics,
            "derive(DeviceRepr) supports structs without generic parameters",
        ));
    }
    let mut repr_c = false;
    for attr in &input.attrs {
        if attr.path().is_ident("repr") {
            attr.parse_nested_meta(|meta| {
                if meta.path.is_ident("C") {
                    repr_c = true;
                }
                Ok(())
            })?;
        }
    }
    if !repr_c {
        return Err(syn::Error::new_spanned(
            name,
            "derive(DeviceRepr) needs #[repr(C)]: Rust's own layout may reorder fields",
        ));
    }
    let message = format!(
        "{name} has padding between or after its fields; add explicit padding fields so every byte is initialised"
    );
    Ok(quote! {
        // SAFETY: #[repr(C)] (checked by the derive), every field is DeviceRepr (the bounds below)
        // and the struct has no padding (the assertion below), so its bytes are its fields' bytes.
        unsafe impl ::cuda_core::DeviceRepr for #name where #(#fields: ::cuda_core::DeviceRepr),* {}
        const _: () = {
            assert!(
                ::core::mem::size_of::<#name>() == 0 #(+ ::core::mem::size_of::<#fields>())*,
                #message
            );
        };
    })
}
