//! The enum macro every room uses: variants with one name each (what files, flags and reports
//! spell). A file of its own so that the crate root only declares the crate.

/// An enum whose variants each have one name (what files, flags and reports spell): the enum
/// as declared, `ALL` in declaration order, `name()` and its inverse `from_name()`, and
/// [`Named`] for code generic over such enums.
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

        impl $crate::named::Named for $enum {
            const ALL: &'static [Self] = &$enum::ALL;

            fn name(self) -> &'static str {
                $enum::name(self)
            }
        }
    };
}
pub(crate) use named_enum;

/// A [`named_enum!`] enum, for code generic over one (a fault parameter's words:
/// `FaultSpec::pick`).
pub trait Named: Copy + 'static {
    /// Every variant, in declaration order.
    const ALL: &'static [Self];
    fn name(self) -> &'static str;
}
