//! The `configSchema` compile budget (docs/contract.md): every class of costly schema is refused
//! with the path and the limit, before it costs more than the budget; honest schemas compile.

use std::time::{Duration, Instant};

use sandcap_core::config_schema::{BUDGET, Budget, Deadline, Limit, SchemaError, compile, compile_within};
use serde_json::{Value, json};

fn over_budget(schema: &Value) -> (String, Limit) {
    let started = Instant::now();
    let result = compile(schema, Deadline::Own);
    // Generous for a debug build on a loaded machine; the release figures: docs/benchmarks/.
    assert!(started.elapsed() < Duration::from_secs(10), "took {:?}", started.elapsed());
    match result {
        Err(SchemaError::OverBudget { at, limit }) => (at, limit),
        other => panic!("expected over budget, got {:?}", other.map(|_| "compiled")),
    }
}

/// Regular expressions that compile to far more than a pattern may take, in every construct
/// and every place a schema holds one.
#[test]
fn costly_patterns_are_refused_with_their_path() {
    let costly = [
        r"\w{50000}",
        r"[a-zA-Z0-9]{50000}",
        r"\p{L}{2000}",
        r"((a|b|c){300}){300}",
        r".{50000}",
        r"(\d{100}x){1000}",
        r"(?=x)\w{50000}",
    ];
    for pattern in costly {
        let placements = [
            (json!({"type": "string", "pattern": pattern}), ".pattern".to_string()),
            (json!({"properties": {"a": {"pattern": pattern}}}), ".properties.a.pattern".to_string()),
            (json!({"patternProperties": {pattern: {}}}), format!(".patternProperties[{}]", json!(pattern))),
            (json!({"propertyNames": {"pattern": pattern}}), ".propertyNames.pattern".to_string()),
            (json!({"items": [{"pattern": pattern}]}), ".items[0].pattern".to_string()),
        ];
        for (schema, path) in placements {
            let (at, limit) = over_budget(&schema);
            assert_eq!(limit, Limit::PatternSize { max: BUDGET.pattern_bytes }, "{pattern}");
            assert_eq!(at, path, "{pattern}");
        }
    }
}

/// Patterns that fit one by one but not together: the one that goes over is named.
#[test]
fn patterns_that_fit_alone_are_refused_together() {
    let schema = json!({"properties": {
        "a": {"pattern": r"\w{30000}"}, "b": {"pattern": r"\w{30001}"}, "c": {"pattern": r"\w{30002}"},
    }});
    let (at, limit) = over_budget(&schema);
    assert_eq!((at.as_str(), limit), (".properties.c.pattern", Limit::PatternsSize { max: BUDGET.patterns_bytes }));
}

#[test]
fn too_many_distinct_patterns_are_refused_before_any_compiles() {
    let properties: serde_json::Map<String, Value> =
        (0..=BUDGET.max_patterns).map(|i| (format!("p{i}"), json!({"pattern": format!("^a{{{i}}}$")}))).collect();
    let (at, limit) = over_budget(&json!({ "properties": properties }));
    assert_eq!(
        (at.as_str(), limit),
        ("", Limit::Patterns { found: BUDGET.max_patterns + 1, max: BUDGET.max_patterns })
    );

    // The same pattern repeated compiles once and counts once.
    let repeated: serde_json::Map<String, Value> =
        (0..1000).map(|i| (format!("p{i}"), json!({"pattern": "^[a-z]+$"}))).collect();
    assert!(compile(&json!({ "properties": repeated }), Deadline::Own).is_ok());
}

#[test]
fn heavy_and_deep_schemas_are_refused_by_a_walk() {
    let heavy = json!({"description": "x".repeat(BUDGET.max_weight)});
    assert_eq!(over_budget(&heavy), (String::new(), Limit::Weight { max: BUDGET.max_weight }));
    let mut deep = json!({"type": "string"});
    for _ in 0..BUDGET.max_depth {
        deep = json!({ "not": deep });
    }
    assert_eq!(over_budget(&deep), (String::new(), Limit::Depth { max: BUDGET.max_depth }));
}

#[test]
fn a_spent_deadline_refuses_for_time() {
    let schema = json!({"properties": {"a": {"pattern": "^b+$"}, "c": {"pattern": "^d+$"}}});
    let spent = Deadline::Shared(Instant::now() - Duration::from_millis(1));
    let budget = Budget { deadline: Duration::from_secs(5), ..BUDGET };
    match compile_within(&schema, &budget, spent) {
        Err(SchemaError::OverBudget { limit: Limit::Deadline { max }, .. }) => assert_eq!(max, budget.deadline),
        other => panic!("{:?}", other.map(|_| "compiled")),
    }
    // A refusal for time is not remembered: the schema compiles with time of its own.
    assert!(compile_within(&schema, &budget, Deadline::Own).is_ok());
}

#[test]
fn honest_schemas_compile_and_validate() {
    let schema = json!({
        "$schema": "https://json-schema.org/draft/2020-12/schema",
        "type": "object",
        "required": ["image"],
        "properties": {
            "image": {"type": "string", "pattern": "^[a-z0-9./-]+(:[a-zA-Z0-9._-]{1,128})?$"},
            "labels": {"type": "object", "patternProperties": {"^[a-z0-9.-]{1,63}$": {"type": "string", "maxLength": 63}}},
            "region": {"enum": ["eu", "us"]},
            "email": {"type": "string", "pattern": "^[^@\\s]+@[^@\\s]+$"},
            "name": {"type": "string", "pattern": "^\\p{L}[\\p{L}\\p{N} ]{0,62}$"},
        },
    });
    let validator = compile(&schema, Deadline::Own).unwrap();
    assert!(validator.is_valid(&json!({"image": "ghcr.io/acme/sandbox:1.2", "labels": {"team": "a"}})));
    assert!(!validator.is_valid(&json!({"image": "UPPER"})));
}

#[test]
fn an_invalid_pattern_is_invalid_not_over_budget() {
    match compile(&json!({"properties": {"a": {"pattern": "(unclosed"}}}), Deadline::Own) {
        Err(e @ SchemaError::Invalid { .. }) => {
            assert_eq!(e.at(), ".properties.a.pattern");
            assert!(e.to_string().starts_with("configSchema.properties.a.pattern: is not a valid JSON Schema"), "{e}");
        }
        other => panic!("{:?}", other.map(|_| "compiled")),
    }
}
