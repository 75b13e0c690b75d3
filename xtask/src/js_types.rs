//! TypeScript declarations of the `berth:policy` contract, generated from
//! `wit/` (`cargo xtask js-types`) into the JavaScript SDK's
//! `contract.d.ts`, in the component model's JavaScript mapping as
//! componentize-qjs gives it: records are objects with camelCase fields,
//! enums their WIT names, variants `{ tag, val }`, lists arrays, integers
//! numbers, `option<T>` `T | undefined`; a function's `result<T, E>` is its
//! value, and its error is thrown. A test keeps the committed file fresh.

use std::fmt::Write as _;
use std::path::{Path, PathBuf};

use anyhow::Context;
use wit_parser::{Docs, Resolve, Type, TypeDefKind, TypeOwner};

pub fn contract_file() -> PathBuf {
    crate::root().join("guests/js/sdk/contract.d.ts")
}

/// Writes the declarations; answers whether the file changed.
pub fn write() -> anyhow::Result<bool> {
    let text = generate(&crate::root().join("wit"))?;
    let path = contract_file();
    if std::fs::read_to_string(&path).is_ok_and(|old| old == text) {
        return Ok(false);
    }
    std::fs::write(&path, text).with_context(|| format!("writing {}", path.display()))?;
    Ok(true)
}

fn pascal(name: &str) -> String {
    name.split('-')
        .map(|w| {
            let mut c = w.chars();
            c.next()
                .map(|f| f.to_ascii_uppercase().to_string() + c.as_str())
                .unwrap_or_default()
        })
        .collect()
}

fn camel(name: &str) -> String {
    let p = pascal(name);
    let mut c = p.chars();
    c.next()
        .map(|f| f.to_ascii_lowercase().to_string() + c.as_str())
        .unwrap_or_default()
}

fn doc(out: &mut String, docs: &Docs, indent: &str) {
    let Some(text) = &docs.contents else { return };
    let _ = writeln!(out, "{indent}/**");
    for line in text.trim_end().lines() {
        let line = line.replace("*/", "*\\/");
        let _ = writeln!(out, "{indent} *{}{line}", if line.is_empty() { "" } else { " " });
    }
    let _ = writeln!(out, "{indent} */");
}

fn ty(resolve: &Resolve, t: &Type) -> anyhow::Result<String> {
    Ok(match t {
        Type::Bool => "boolean".into(),
        Type::U8 | Type::U16 | Type::U32 | Type::U64 | Type::S8 | Type::S16 | Type::S32 | Type::S64 => {
            "number".into()
        }
        Type::F32 | Type::F64 => "number".into(),
        Type::Char | Type::String => "string".into(),
        Type::ErrorContext => anyhow::bail!("error-context has no place in a policy contract"),
        Type::Id(id) => {
            let def = &resolve.types[*id];
            if let Some(name) = &def.name {
                return Ok(pascal(name));
            }
            match &def.kind {
                TypeDefKind::List(t) => format!("{}[]", wrap(ty(resolve, t)?)),
                TypeDefKind::Tuple(t) => {
                    let items: anyhow::Result<Vec<String>> = t.types.iter().map(|t| ty(resolve, t)).collect();
                    format!("[{}]", items?.join(", "))
                }
                TypeDefKind::Option(t) => format!("{} | undefined", ty(resolve, t)?),
                TypeDefKind::Type(t) => ty(resolve, t)?,
                other => anyhow::bail!("an anonymous {} is not in Berth's contract", other.as_str()),
            }
        }
    })
}

/// A union or optional type as an array's element.
fn wrap(t: String) -> String {
    if t.contains(" | ") { format!("({t})") } else { t }
}

fn definition(out: &mut String, resolve: &Resolve, id: wit_parser::TypeId) -> anyhow::Result<()> {
    let def = &resolve.types[id];
    let Some(name) = &def.name else { return Ok(()) };
    let name = pascal(name);
    doc(out, &def.docs, "");
    match &def.kind {
        TypeDefKind::Record(r) => {
            let _ = writeln!(out, "export interface {name} {{");
            for f in &r.fields {
                doc(out, &f.docs, "  ");
                let _ = writeln!(out, "  {}: {};", camel(&f.name), ty(resolve, &f.ty)?);
            }
            let _ = writeln!(out, "}}");
        }
        TypeDefKind::Enum(e) => {
            let cases: Vec<String> = e.cases.iter().map(|c| format!("\"{}\"", c.name)).collect();
            let _ = writeln!(out, "export type {name} =\n  | {};", cases.join("\n  | "));
        }
        TypeDefKind::Variant(v) => {
            let mut cases = Vec::new();
            for c in &v.cases {
                cases.push(match &c.ty {
                    Some(t) => format!("{{ tag: \"{}\"; val: {} }}", c.name, ty(resolve, t)?),
                    None => format!("{{ tag: \"{}\" }}", c.name),
                });
            }
            let _ = writeln!(out, "export type {name} =\n  | {};", cases.join("\n  | "));
        }
        TypeDefKind::Type(_) | TypeDefKind::List(_) | TypeDefKind::Tuple(_) | TypeDefKind::Option(_) => {
            // The alias's own target, not its name.
            let target = match &def.kind {
                TypeDefKind::Type(t) => ty(resolve, t)?,
                TypeDefKind::List(t) => format!("{}[]", wrap(ty(resolve, t)?)),
                TypeDefKind::Tuple(t) => {
                    let items: anyhow::Result<Vec<String>> = t.types.iter().map(|t| ty(resolve, t)).collect();
                    format!("[{}]", items?.join(", "))
                }
                TypeDefKind::Option(t) => format!("{} | undefined", ty(resolve, t)?),
                _ => unreachable!(),
            };
            if target != name {
                let _ = writeln!(out, "export type {name} = {target};");
            }
        }
        other => anyhow::bail!("type {name}: a {} is not in Berth's contract", other.as_str()),
    }
    out.push('\n');
    Ok(())
}

/// The declarations for the newest `berth:policy` package under `wit`.
pub fn generate(wit: &Path) -> anyhow::Result<String> {
    let mut resolve = Resolve::default();
    let (package, _) = resolve
        .push_dir(wit)
        .with_context(|| format!("reading the WIT package in {}", wit.display()))?;
    let pkg = &resolve.packages[package];
    let mut out = format!(
        "// Generated from wit/ by `cargo xtask js-types`: do not edit.\n\
         // The {} contract in the component model's JavaScript mapping:\n\
         // records are objects with camelCase fields, enums their WIT names,\n\
         // variants {{ tag, val }}, lists arrays, integers numbers. A function\n\
         // returning result<T, E> returns T and throws to answer the error.\n\n",
        pkg.name
    );
    for (name, iface_id) in &pkg.interfaces {
        let iface = &resolve.interfaces[*iface_id];
        let _ = writeln!(out, "// interface {name}\n");
        for id in iface.types.values() {
            // `use`d types are the defining interface's.
            if resolve.types[*id].owner == TypeOwner::Interface(*iface_id)
                && !matches!(&resolve.types[*id].kind, TypeDefKind::Type(Type::Id(t)) if resolve.types[*t].name == resolve.types[*id].name)
            {
                definition(&mut out, &resolve, *id)?;
            }
        }
        if iface.functions.is_empty() {
            continue;
        }
        doc(&mut out, &iface.docs, "");
        let _ = writeln!(out, "export interface {} {{", pascal(name));
        for f in iface.functions.values() {
            doc(&mut out, &f.docs, "  ");
            let params: anyhow::Result<Vec<String>> = f
                .params
                .iter()
                .map(|p| Ok(format!("{}: {}", camel(&p.name), ty(&resolve, &p.ty)?)))
                .collect();
            let result = match &f.result {
                None => "void".to_string(),
                Some(Type::Id(id)) => match &resolve.types[*id].kind {
                    TypeDefKind::Result(r) if resolve.types[*id].name.is_none() => match &r.ok {
                        Some(t) => ty(&resolve, t)?,
                        None => "void".into(),
                    },
                    _ => ty(&resolve, &Type::Id(*id))?,
                },
                Some(t) => ty(&resolve, t)?,
            };
            let _ = writeln!(out, "  {}({}): {};", camel(&f.name), params?.join(", "), result);
        }
        let _ = writeln!(out, "}}\n");
    }
    Ok(out.trim_end().to_string() + "\n")
}

#[cfg(test)]
mod tests {
    #[test]
    fn the_committed_declarations_are_those_of_wit() {
        let fresh = super::generate(&crate::root().join("wit")).unwrap();
        let committed = std::fs::read_to_string(super::contract_file()).unwrap_or_default();
        assert!(
            fresh == committed,
            "guests/js/sdk/contract.d.ts is not what wit/ says: run `cargo xtask js-types`"
        );
    }
}
