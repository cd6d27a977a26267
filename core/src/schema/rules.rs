//! The CEL rules (`x-kubernetes-validations`) of an object that fits the schema.

use std::collections::HashMap;
use std::fmt::Write as _;
use std::sync::Arc;

use kube_cel::cel::{self, Context};
use kube_cel::{CompilationResult, CompiledSchema};
use serde_json::Value;

use super::crds::Crds;
use super::messages::go_value;

/// The CEL walk, over an object that passed the structural schema.
pub(super) struct Cel<'e> {
    pub(super) crds: &'e Crds,
    pub(super) errors: &'e mut Vec<String>,
}

impl Cel<'_> {
    /// Evaluates the CEL rules of `compiled` and below over `value`; `old` is the stored value at
    /// the same path, for transition rules.
    pub(super) fn evaluate(
        &mut self,
        compiled: &CompiledSchema,
        value: &Value,
        old: Option<&Value>,
        path: &mut String,
    ) {
        if !compiled.validations.is_empty() {
            let this = cel_value(value);
            let old_cel = old.map(cel_value);
            let mut ctx = self.crds.context.new_inner_scope();
            ctx.add_variable_from_value("self", this);
            if let Some(old) = &old_cel {
                ctx.add_variable_from_value("oldSelf", old.clone());
            }
            for rule in compiled.validations.iter().flatten() {
                if rule.is_transition_rule && old.is_none() {
                    continue;
                }
                if !matches!(rule.program.execute(&ctx), Ok(cel::Value::Bool(true))) {
                    let at = match &rule.rule.field_path {
                        Some(field) => format!("{path}{field}"),
                        None => path.clone(),
                    };
                    let detail = cel_detail(rule, &ctx, value);
                    self.errors.push(format!("{at}: Invalid value: {detail}"));
                }
            }
        }
        let len = path.len();
        match value {
            Value::Object(map) => {
                for (key, child) in map {
                    let (Some(compiled), false) = (compiled.properties.get(key.as_str()), child.is_null()) else {
                        continue;
                    };
                    let _ = write!(path, ".{key}");
                    let old = old.and_then(|o| o.get(key.as_str()));
                    self.evaluate(compiled, child, old, path);
                    path.truncate(len);
                }
            }
            Value::Array(items) => {
                if let Some(compiled) = &compiled.items {
                    for (i, item) in items.iter().enumerate() {
                        let _ = write!(path, "[{i}]");
                        // Transition rules under a list would need the list's keys to pair items;
                        // sandcap's CRDs have none there.
                        self.evaluate(compiled, item, None, path);
                        path.truncate(len);
                    }
                }
            }
            _ => {}
        }
    }
}

/// The detail of a failed CEL rule: the rule's message, after the value of a scalar (alone for an
/// object or a list, whose value the apiserver omits).
pub(super) fn cel_detail(rule: &CompilationResult, ctx: &Context, value: &Value) -> String {
    let message = rule_message(rule, ctx);
    match value {
        Value::Object(_) | Value::Array(_) => message,
        scalar => format!("{}: {message}", go_value(scalar)),
    }
}

/// The longest evaluated `messageExpression` the apiserver shows, in bytes.
const MAX_MESSAGE_EXPRESSION_BYTES: usize = 5 * 1024;

/// A failed rule's message as the apiserver picks it: its `messageExpression`, trimmed, unless
/// that fails, is not a string, or is empty, longer than 5 KiB or on several lines; then its
/// `message`, trimmed; then `failed rule: <rule>`. (The apiserver also stops at a
/// `messageExpression` over its cost budget; sandcap's are bounded well below it.)
fn rule_message(rule: &CompilationResult, ctx: &Context) -> String {
    let evaluated = rule.message_program.as_ref().and_then(|p| match p.execute(ctx) {
        Ok(cel::Value::String(s)) => Some(s.trim().to_string()),
        _ => None,
    });
    let shown = |m: &String| !m.is_empty() && m.len() <= MAX_MESSAGE_EXPRESSION_BYTES && !m.contains('\n');
    evaluated.filter(shown).unwrap_or_else(|| match rule.rule.message.as_deref() {
        Some(message) if !message.is_empty() => message.trim().to_string(),
        _ => format!("failed rule: {}", rule.rule.rule.trim()),
    })
}

/// JSON as CEL sees it: a `null` field is absent (`has()` is false), as the apiserver drops it.
pub(super) fn cel_value(value: &Value) -> cel::Value {
    match value {
        Value::Null => cel::Value::Null,
        Value::Bool(b) => cel::Value::Bool(*b),
        Value::Number(n) => match (n.as_i64(), n.as_f64()) {
            (Some(i), _) => cel::Value::Int(i),
            (None, Some(f)) => cel::Value::Float(f),
            _ => cel::Value::Null,
        },
        Value::String(s) => cel::Value::String(Arc::new(s.clone())),
        Value::Array(items) => cel::Value::List(Arc::new(items.iter().map(cel_value).collect())),
        Value::Object(map) => {
            let entries: HashMap<cel::objects::Key, cel::Value> = map
                .iter()
                .filter(|(_, v)| !v.is_null())
                .map(|(k, v)| (cel::objects::Key::String(Arc::new(k.clone())), cel_value(v)))
                .collect();
            cel::Value::Map(cel::objects::Map { map: Arc::new(entries) })
        }
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    /// What the apiserver shows for a failed rule with this `messageExpression` and `message`.
    fn shown(message_expression: &str, message: Option<&str>) -> String {
        let mut rule = json!({"rule": " false ", "messageExpression": message_expression});
        if let Some(message) = message {
            rule["message"] = json!(message);
        }
        let compiled = kube_cel::compile_schema(&json!({"type": "object", "x-kubernetes-validations": [rule]}));
        let rule = compiled.validations[0].as_ref().expect("compiles");
        rule_message(rule, &Context::default())
    }

    #[test]
    fn a_message_expression_falls_back_to_the_message_as_the_apiserver_does() {
        assert_eq!(shown("'  named  '", Some("fixed")), "named");
        for unusable in ["''", "'  '", "'two\\nlines'", "'x'.repeat(1)", "1", &format!("'{}'", "x".repeat(5121))] {
            assert_eq!(shown(unusable, Some(" fixed ")), "fixed", "{unusable}");
        }
        assert_eq!(shown(&format!("'{}'", "x".repeat(5120)), Some("fixed")).len(), 5120);
        assert_eq!(shown("''", None), "failed rule: false");
    }
}
