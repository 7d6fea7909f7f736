//! `#[derive(DeviceRepr)]`: lets a `#[repr(C)]` struct of plain-data fields be passed to a kernel
//! by value. Use it through `cuda_core::DeviceRepr`.

use proc_macro::TokenStream;
use quote::quote;
use syn::{parse_macro_input, Data, DeriveInput, Fields};

/// Implements `cuda_core::DeviceRepr` for a struct, checking at compile time that it is
/// `#[repr(C)]`, that every field is `DeviceRepr`, and that it has no padding (whose bytes the
/// kernel would read uninitialised).
///
/// `#[repr(packed)]` and `#[repr(align(N))]` are refused: the kernel's C++ parameter type has
/// natural alignment, so a packed struct puts its fields at other offsets than the kernel reads
/// them from (with no padding for the padding check to find), and a raised alignment changes the
/// struct's alignment and size.
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
                } else if meta.path.is_ident("packed") {
                    return Err(meta.error(
                        "derive(DeviceRepr) refuses #[repr(packed)]: the kernel's C++ parameter type has natural \
                         alignment and the padding that brings, while a packed struct has alignment 1 and no \
                         padding, so its size and field offsets can differ from what the kernel reads (and the \
                         padding check cannot see it); remove `packed` and add explicit padding fields where C++ \
                         puts padding",
                    ));
                } else if meta.path.is_ident("align") {
                    return Err(meta.error(
                        "derive(DeviceRepr) refuses #[repr(align(N))]: the derive cannot see the kernel's C++ type, \
                         and a plain C++ struct has natural alignment, so a raised alignment (and the tail padding \
                         it brings) would not match the parameter; if the kernel's type really is `alignas(N)`, \
                         implement DeviceRepr by hand after checking size, alignment and offsets",
                    ));
                } else if meta.input.peek(syn::token::Paren) {
                    // Any other repr with arguments: skip them (Rust reports what it does not know).
                    let content;
                    syn::parenthesized!(content in meta.input);
                    content.parse::<proc_macro2::TokenStream>()?;
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

#[cfg(test)]
mod tests {
    use super::expand;

    fn refusal(source: &str) -> String {
        let input: syn::DeriveInput = syn::parse_str(source).unwrap();
        match expand(&input) {
            Ok(tokens) => panic!("the derive accepted `{source}`: {tokens}"),
            Err(e) => e.to_string(),
        }
    }

    #[test]
    fn plain_repr_c_is_accepted() {
        let input: syn::DeriveInput =
            syn::parse_str("#[derive(Clone, Copy)] #[repr(C)] struct P { a: f32, b: u32 }").unwrap();
        assert!(expand(&input).is_ok());
    }

    #[test]
    fn packed_is_refused_with_the_reason() {
        for source in [
            "#[repr(C, packed)] struct P { a: u8, b: u32 }",
            "#[repr(C, packed(2))] struct P { a: u8, b: u32 }",
            "#[repr(C)] #[repr(packed)] struct P { a: u8, b: u32 }",
            "#[repr(packed)] struct P { a: u8, b: u32 }",
        ] {
            let message = refusal(source);
            assert!(message.contains("refuses #[repr(packed)]"), "{source}: {message}");
            assert!(message.contains("natural"), "{source}: {message}");
        }
    }

    #[test]
    fn align_is_refused_with_the_reason() {
        for source in [
            "#[repr(C, align(16))] struct P { a: f32, b: f32, c: f32, d: f32 }",
            "#[repr(C)] #[repr(align(8))] struct P { a: u32, b: u32 }",
        ] {
            let message = refusal(source);
            assert!(message.contains("refuses #[repr(align(N))]"), "{source}: {message}");
            assert!(message.contains("natural alignment"), "{source}: {message}");
        }
    }

    #[test]
    fn missing_repr_c_is_refused() {
        assert!(refusal("struct P { a: f32 }").contains("needs #[repr(C)]"));
        assert!(refusal("#[repr(transparent)] struct P { a: f32 }").contains("needs #[repr(C)]"));
    }
}
