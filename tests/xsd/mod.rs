//! A validator for the part of XML Schema that tests/data/junit-10.xsd uses, driven by the
//! schema file: global and local element declarations (by `name`/`type` or `ref`), named and
//! inline complex types with `mixed`, `xs:sequence` and `xs:choice` with `minOccurs`/`maxOccurs`,
//! attributes (`use="required"`, no undeclared ones), and simple types restricted by
//! `xs:pattern` (anchored, as XML Schema patterns are). Anything else in a schema is refused,
//! so the validator cannot silently accept what it does not understand.

use std::collections::{BTreeSet, HashMap};

const XS: &str = "http://www.w3.org/2001/XMLSchema";

#[derive(Debug, Clone)]
enum Type {
    /// Text only (xs:string or a pattern-restricted simple type).
    Simple(Option<regex::Regex>),
    Complex(Complex),
    /// A named type, resolved when used.
    Named(String),
}

#[derive(Debug, Clone)]
struct Complex {
    mixed: bool,
    particle: Option<Particle>,
    attrs: Vec<Attr>,
}

#[derive(Debug, Clone)]
struct Attr {
    name: String,
    required: bool,
    ty: String,
}

#[derive(Debug, Clone)]
enum Term {
    /// A global element by name, or a local one with its type.
    Element {
        name: String,
        local: Option<Box<Type>>,
    },
    Sequence(Vec<Particle>),
    Choice(Vec<Particle>),
}

#[derive(Debug, Clone)]
struct Particle {
    term: Term,
    min: usize,
    max: Option<usize>,
}

pub struct Schema {
    elements: HashMap<String, Type>,
    types: HashMap<String, Type>,
}

fn xs<'a>(n: roxmltree::Node<'a, 'a>) -> impl Iterator<Item = roxmltree::Node<'a, 'a>> {
    n.children().filter(|c| c.is_element() && c.tag_name().namespace() == Some(XS))
}

fn occurs(n: roxmltree::Node) -> (usize, Option<usize>) {
    let min = n.attribute("minOccurs").map_or(1, |v| v.parse().expect("minOccurs"));
    let max = match n.attribute("maxOccurs") {
        Some("unbounded") => None,
        Some(v) => Some(v.parse().expect("maxOccurs")),
        None => Some(1),
    };
    (min, max)
}

fn simple(n: roxmltree::Node) -> Type {
    let restriction = xs(n).find(|c| c.tag_name().name() == "restriction").expect("xs:restriction");
    assert_eq!(restriction.attribute("base"), Some("xs:string"), "only string restrictions are understood");
    let mut pattern = None;
    for facet in xs(restriction) {
        assert_eq!(facet.tag_name().name(), "pattern", "only xs:pattern facets are understood");
        let v = facet.attribute("value").expect("pattern value");
        pattern = Some(regex::Regex::new(&format!("^(?:{v})$")).expect("pattern compiles"));
    }
    Type::Simple(pattern)
}

fn particle(n: roxmltree::Node) -> Particle {
    let (min, max) = occurs(n);
    let term = match n.tag_name().name() {
        "element" => match (n.attribute("ref"), n.attribute("name")) {
            (Some(r), _) => Term::Element { name: r.to_string(), local: None },
            (None, Some(name)) => {
                Term::Element { name: name.to_string(), local: Some(Box::new(element_type(n))) }
            }
            _ => panic!("element without name or ref"),
        },
        "sequence" => Term::Sequence(xs(n).map(particle).collect()),
        "choice" => Term::Choice(xs(n).map(particle).collect()),
        other => panic!("xs:{other} is not understood"),
    };
    Particle { term, min, max }
}

fn complex(n: roxmltree::Node) -> Complex {
    let mut c = Complex { mixed: n.attribute("mixed") == Some("true"), particle: None, attrs: Vec::new() };
    for child in xs(n) {
        match child.tag_name().name() {
            "sequence" | "choice" => c.particle = Some(particle(child)),
            "attribute" => c.attrs.push(Attr {
                name: child.attribute("name").expect("attribute name").to_string(),
                required: child.attribute("use") == Some("required"),
                ty: child.attribute("type").unwrap_or("xs:string").to_string(),
            }),
            other => panic!("xs:{other} in a complex type is not understood"),
        }
    }
    c
}

fn element_type(n: roxmltree::Node) -> Type {
    match n.attribute("type") {
        Some("xs:string") => Type::Simple(None),
        Some(named) => Type::Named(named.to_string()),
        None => match xs(n).next() {
            Some(c) if c.tag_name().name() == "complexType" => Type::Complex(complex(c)),
            Some(c) if c.tag_name().name() == "simpleType" => simple(c),
            None => Type::Simple(None),
            Some(c) => panic!("xs:{} in an element is not understood", c.tag_name().name()),
        },
    }
}

impl Schema {
    pub fn parse(text: &str) -> Schema {
        let doc = roxmltree::Document::parse(text).expect("the schema is XML");
        let root = doc.root_element();
        assert_eq!((root.tag_name().namespace(), root.tag_name().name()), (Some(XS), "schema"));
        let mut s = Schema { elements: HashMap::new(), types: HashMap::new() };
        for n in xs(root) {
            let name = n.attribute("name").expect("global declarations are named").to_string();
            match n.tag_name().name() {
                "element" => s.elements.insert(name, element_type(n)),
                "complexType" => s.types.insert(name, Type::Complex(complex(n))),
                "simpleType" => s.types.insert(name, simple(n)),
                other => panic!("global xs:{other} is not understood"),
            };
        }
        s
    }

    fn resolve<'a>(&'a self, t: &'a Type) -> &'a Type {
        match t {
            Type::Named(n) => self.types.get(n).unwrap_or_else(|| panic!("type {n} is not declared")),
            t => t,
        }
    }

    fn pattern(&self, ty: &str) -> Option<&regex::Regex> {
        match self.types.get(ty) {
            Some(Type::Simple(p)) => p.as_ref(),
            _ => None,
        }
    }

    /// Validate a document: its root must be a global element. Returns every violation.
    pub fn validate(&self, text: &str) -> Vec<String> {
        let doc = match roxmltree::Document::parse(text) {
            Ok(d) => d,
            Err(e) => return vec![format!("not well-formed XML: {e}")],
        };
        let root = doc.root_element();
        let mut errors = Vec::new();
        match self.elements.get(root.tag_name().name()) {
            Some(t) => self.check(root, t, &mut errors),
            None => errors.push(format!("root <{}> is not declared", root.tag_name().name())),
        }
        errors
    }

    fn check(&self, n: roxmltree::Node, t: &Type, errors: &mut Vec<String>) {
        let at = format!("<{}> at byte {}", n.tag_name().name(), n.range().start);
        let children: Vec<roxmltree::Node> = n.children().filter(|c| c.is_element()).collect();
        let text: String = n.children().filter(|c| c.is_text()).filter_map(|c| c.text()).collect();
        match self.resolve(t) {
            Type::Simple(pattern) => {
                if !children.is_empty() {
                    errors.push(format!("{at}: text only, has child elements"));
                }
                if n.attributes().len() > 0 {
                    errors.push(format!("{at}: a simple type takes no attributes"));
                }
                if let Some(p) = pattern.as_ref().filter(|p| !p.is_match(&text)) {
                    errors.push(format!("{at}: `{text}` does not match {}", p.as_str()));
                }
            }
            Type::Complex(c) => {
                for a in n.attributes() {
                    match c.attrs.iter().find(|d| d.name == a.name()) {
                        None => errors.push(format!("{at}: attribute `{}` is not declared", a.name())),
                        Some(d) => {
                            if let Some(p) = self.pattern(&d.ty).filter(|p| !p.is_match(a.value())) {
                                errors.push(format!(
                                    "{at}: {}=`{}` does not match {}",
                                    a.name(),
                                    a.value(),
                                    p.as_str()
                                ));
                            }
                        }
                    }
                }
                for d in c.attrs.iter().filter(|d| d.required) {
                    if n.attribute(d.name.as_str()).is_none() {
                        errors.push(format!("{at}: required attribute `{}` is missing", d.name));
                    }
                }
                if !c.mixed && !text.trim().is_empty() {
                    errors.push(format!("{at}: text `{}` in element-only content", text.trim()));
                }
                let names: Vec<&str> = children.iter().map(|c| c.tag_name().name()).collect();
                let ok = match &c.particle {
                    None => names.is_empty(),
                    Some(p) => ends(p, &names, 0).contains(&names.len()),
                };
                if !ok {
                    errors.push(format!("{at}: children {names:?} do not fit the content model"));
                    return;
                }
                for child in children {
                    let name = child.tag_name().name();
                    let local = c.particle.as_ref().and_then(|p| local_type(p, name));
                    match local.or_else(|| self.elements.get(name)) {
                        Some(t) => self.check(child, t, errors),
                        None => errors.push(format!("{at}: <{name}> is not declared")),
                    }
                }
            }
            Type::Named(_) => unreachable!("resolved"),
        }
    }
}

fn local_type<'a>(p: &'a Particle, name: &str) -> Option<&'a Type> {
    match &p.term {
        Term::Element { name: n, local: Some(t) } if n == name => Some(t),
        Term::Element { .. } => None,
        Term::Sequence(ps) | Term::Choice(ps) => ps.iter().find_map(|p| local_type(p, name)),
    }
}

/// Where a match of `p` starting at `start` may end.
fn ends(p: &Particle, names: &[&str], start: usize) -> BTreeSet<usize> {
    let mut result = BTreeSet::new();
    if p.min == 0 {
        result.insert(start);
    }
    let mut frontier = BTreeSet::from([start]);
    let mut seen = BTreeSet::from([start]);
    let limit = p.max.unwrap_or(names.len() + 1);
    for k in 1..=limit {
        let mut next = BTreeSet::new();
        for &s in &frontier {
            next.extend(once(&p.term, names, s));
        }
        if k >= p.min {
            result.extend(next.iter().copied());
        }
        // Past the minimum, positions already reached add nothing new.
        let fresh: BTreeSet<usize> =
            if k >= p.min { next.difference(&seen).copied().collect() } else { next.clone() };
        seen.extend(next.iter().copied());
        if fresh.is_empty() {
            break;
        }
        frontier = fresh;
    }
    result
}

fn once(t: &Term, names: &[&str], start: usize) -> BTreeSet<usize> {
    match t {
        Term::Element { name, .. } => {
            if names.get(start) == Some(&name.as_str()) {
                BTreeSet::from([start + 1])
            } else {
                BTreeSet::new()
            }
        }
        Term::Sequence(items) => {
            let mut at = BTreeSet::from([start]);
            for item in items {
                at = at.iter().flat_map(|&s| ends(item, names, s)).collect();
            }
            at
        }
        Term::Choice(items) => items.iter().flat_map(|i| ends(i, names, start)).collect(),
    }
}

/// The committed JUnit schema.
pub fn junit() -> Schema {
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/data/junit-10.xsd");
    Schema::parse(&std::fs::read_to_string(path).unwrap())
}

/// The validator rejects what the schema rejects (so a pass means something).
pub fn self_test() {
    let s = junit();
    let good = r#"<testsuites><testsuite name="t" tests="1" failures="0" errors="0" time="1.5"><testcase name="a"><flakyFailure type="flaky"/><system-out>x</system-out></testcase></testsuite></testsuites>"#;
    assert_eq!(s.validate(good), Vec::<String>::new());
    for (bad, why) in [
        (
            r#"<testsuites><testsuite name="t" tests="1" failures="0"/></testsuites>"#,
            "required attribute `errors`",
        ),
        (
            r#"<testsuites><testsuite name="t" tests="1" failures="0" errors="0" time="1.2.3"/></testsuites>"#,
            "does not match",
        ),
        (r#"<testsuites><testcase name="a"/></testsuites>"#, "content model"),
        (
            r#"<testsuites><testsuite name="t" tests="1" failures="0" errors="0"><testcase name="a" colour="red"/></testsuite></testsuites>"#,
            "not declared",
        ),
        (
            r#"<testsuites><testsuite name="t" tests="1" failures="0" errors="0"><testcase name="a"><flakyFailure/></testcase></testsuite></testsuites>"#,
            "required attribute `type`",
        ),
        (
            r#"<testsuites><testsuite name="t" tests="1" failures="0" errors="0">text</testsuite></testsuites>"#,
            "element-only",
        ),
    ] {
        let errors = s.validate(bad);
        assert!(errors.iter().any(|e| e.contains(why)), "{bad}: expected `{why}`, got {errors:?}");
    }
}
