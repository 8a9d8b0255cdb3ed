//! Go's `encoding/json` output for the Go types the CNSet hash covers.
//!
//! Go writes struct fields in declaration order, drops `omitempty` fields
//! holding a zero value, always writes the others (zero values included),
//! sorts map keys and escapes `<`, `>`, `&`. JSON as read from the API server
//! has none of that order, so each Go type the hash can meet is described by
//! a [`Shape`]; a Kubernetes type not described here makes the hash
//! [`GoJsonError::Unsupported`] rather than silently different from Go's.

use std::fmt::Write as _;

use serde_json::Value;

use crate::quantity::Quantity;

/// How a Go field is omitted.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Omit {
    /// Pointer, slice or map with `omitempty`: dropped when absent or empty.
    Empty,
    /// No `omitempty`: always written, as the zero value when absent.
    Never,
    /// A pointer without `omitempty` never occurs in the covered types; a
    /// pointer with `omitempty` is written when present, even if zero.
    Nil,
}

#[derive(Clone, Copy, Debug)]
pub enum Shape {
    String,
    Bool,
    Int,
    Quantity,
    /// A Go slice of the shape.
    List(&'static Shape),
    /// A Go `map[string]` of the shape.
    Map(&'static Shape),
    Struct(&'static [Field]),
    /// A value Go marshals itself (the config's TOML text); the caller
    /// writes it beforehand into a string.
    Text,
    /// A Kubernetes type whose Go field order is not described here: any
    /// value makes the hash [`GoJsonError::Unsupported`].
    Unsupported,
}

#[derive(Clone, Copy, Debug)]
pub struct Field {
    pub name: &'static str,
    pub shape: Shape,
    pub omit: Omit,
}

pub const fn field(name: &'static str, shape: Shape, omit: Omit) -> Field {
    Field { name, shape, omit }
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum GoJsonError {
    #[error(
        "`{path}` is a field whose Go encoding cnpool does not reproduce yet, so the Go operator's CNSet name cannot be computed for this template"
    )]
    Unsupported { path: String },
    #[error("`{path}` does not have the type the Go operator expects ({expected})")]
    Type { path: String, expected: &'static str },
    #[error("`{path}`: {reason}")]
    Invalid { path: String, reason: String },
}

/// Writes `value` (JSON as read) as Go would marshal a `shape` decoded from it.
pub fn write(value: Option<&Value>, shape: &Shape, path: &str, out: &mut String) -> Result<(), GoJsonError> {
    let value = value.filter(|value| !value.is_null());
    let type_error = |expected| GoJsonError::Type { path: path.to_owned(), expected };
    match shape {
        Shape::Unsupported => match value {
            None => out.push_str("null"),
            Some(_) => return Err(GoJsonError::Unsupported { path: path.to_owned() }),
        },
        Shape::String | Shape::Text => match value {
            None => out.push_str("\"\""),
            Some(Value::String(text)) => write_string(text, out),
            Some(_) => return Err(type_error("a string")),
        },
        Shape::Bool => match value {
            None => out.push_str("false"),
            Some(Value::Bool(flag)) => out.push_str(if *flag { "true" } else { "false" }),
            Some(_) => return Err(type_error("a boolean")),
        },
        Shape::Int => match value {
            None => out.push('0'),
            Some(Value::Number(number)) if number.is_i64() || number.is_u64() => {
                let _ = write!(out, "{number}");
            }
            Some(_) => return Err(type_error("an integer")),
        },
        Shape::Quantity => {
            let text = match value {
                None => "0".to_owned(),
                Some(Value::String(text)) => Quantity::parse(text)
                    .map_err(|error| GoJsonError::Invalid { path: path.to_owned(), reason: error.to_string() })?
                    .to_string(),
                Some(Value::Number(number)) => Quantity::parse(&number.to_string())
                    .map_err(|error| GoJsonError::Invalid { path: path.to_owned(), reason: error.to_string() })?
                    .to_string(),
                Some(_) => return Err(type_error("a quantity")),
            };
            write_string(&text, out);
        }
        Shape::List(item) => match value {
            None => out.push_str("null"),
            Some(Value::Array(items)) => {
                out.push('[');
                for (index, entry) in items.iter().enumerate() {
                    if index > 0 {
                        out.push(',');
                    }
                    write(Some(entry), item, &format!("{path}[{index}]"), out)?;
                }
                out.push(']');
            }
            Some(_) => return Err(type_error("a list")),
        },
        Shape::Map(item) => match value {
            None => out.push_str("null"),
            Some(Value::Object(map)) => {
                let mut keys: Vec<&String> = map.keys().collect();
                keys.sort();
                out.push('{');
                for (index, key) in keys.into_iter().enumerate() {
                    if index > 0 {
                        out.push(',');
                    }
                    write_string(key, out);
                    out.push(':');
                    write(map.get(key), item, &format!("{path}.{key}"), out)?;
                }
                out.push('}');
            }
            Some(_) => return Err(type_error("an object")),
        },
        Shape::Struct(fields) => {
            let empty = serde_json::Map::new();
            let map = match value {
                None => &empty,
                Some(Value::Object(map)) => map,
                Some(_) => return Err(type_error("an object")),
            };
            write_struct(map, fields, path, out)?;
        }
    }
    Ok(())
}

/// A struct: its known fields in order. Keys Go does not know are dropped,
/// as Go's decoder drops them.
pub fn write_struct(
    map: &serde_json::Map<String, Value>,
    fields: &[Field],
    path: &str,
    out: &mut String,
) -> Result<(), GoJsonError> {
    out.push('{');
    let mut first = true;
    for field in fields {
        let value = map.get(field.name).filter(|value| !value.is_null());
        let child = if path.is_empty() { field.name.to_owned() } else { format!("{path}.{}", field.name) };
        let written = match field.omit {
            Omit::Never => true,
            Omit::Nil => value.is_some(),
            Omit::Empty => value.is_some_and(|value| !is_empty(value, &field.shape)),
        };
        if !written {
            continue;
        }
        if !first {
            out.push(',');
        }
        first = false;
        write_string(field.name, out);
        out.push(':');
        write(value, &field.shape, &child, out)?;
    }
    out.push('}');
    Ok(())
}

/// Whether Go's `omitempty` drops the value: zero scalars, empty lists and
/// maps; structs never.
fn is_empty(value: &Value, shape: &Shape) -> bool {
    match (shape, value) {
        (Shape::Struct(_), _) | (Shape::Quantity, _) => false,
        (_, Value::String(text)) => text.is_empty(),
        (_, Value::Bool(flag)) => !flag,
        (_, Value::Number(number)) => number.as_f64() == Some(0.0),
        (_, Value::Array(items)) => items.is_empty(),
        (_, Value::Object(map)) => map.is_empty(),
        (_, Value::Null) => true,
    }
}

/// A Go JSON string: HTML-safe escapes, `\b` and `\f` short forms (Go ≥ 1.22).
pub fn write_string(text: &str, out: &mut String) {
    out.push('"');
    for c in text.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            '\u{8}' => out.push_str("\\b"),
            '\u{c}' => out.push_str("\\f"),
            '<' | '>' | '&' | '\u{2028}' | '\u{2029}' => {
                let _ = write!(out, "\\u{:04x}", c as u32);
            }
            c if (c as u32) < 0x20 => {
                let _ = write!(out, "\\u{:04x}", c as u32);
            }
            c => out.push(c),
        }
    }
    out.push('"');
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn strings_escape_like_go() {
        let mut out = String::new();
        write_string("a<b>&\"\\\n\u{1}\u{8}é", &mut out);
        assert_eq!(out, r#""a\u003cb\u003e\u0026\"\\\n\u0001\bé""#);
    }

    #[test]
    fn omitempty_drops_zero_values_and_plain_fields_always_appear() {
        const FIELDS: &[Field] = &[
            field("name", Shape::String, Omit::Never),
            field("value", Shape::String, Omit::Empty),
            field("optional", Shape::Bool, Omit::Nil),
            field("items", Shape::List(&Shape::String), Omit::Empty),
        ];
        let value = serde_json::json!({"value": "", "optional": false, "items": [], "unknown": 1});
        let mut out = String::new();
        write(Some(&value), &Shape::Struct(FIELDS), "", &mut out).unwrap();
        assert_eq!(out, r#"{"name":"","optional":false}"#);
    }
}
