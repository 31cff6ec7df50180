//! The enum macro every room uses: variants with one name each (what files, flags and reports
//! spell). A file of its own so that the crate root only declares the crate.

/// An enum whose variants each have one name (what files, flags and reports spell): the enum
/// as declared, `ALL` in declaration order, `name()` and its inverse `from_name()`.
macro_rules! named_enum {
    ($(#[$meta:meta])* $vis:vis enum $enum:ident {
        $($(#[$vmeta:meta])* $variant:ident = $name:literal,)+
    }) => {
        $(#[$meta])*
        $vis enum $enum { $($(#[$vmeta])* $variant,)+ }

        impl $enum {
            pub const ALL: [$enum; [$($name),+].len()] = [$($enum::$variant),+];

            pub fn name(self) -> &'static str {
                match self { $($enum::$variant => $name,)+ }
            }

            pub fn from_name(s: &str) -> Option<$enum> {
                Self::ALL.into_iter().find(|v| v.name() == s)
            }
        }
    };
}
pub(crate) use named_enum;
