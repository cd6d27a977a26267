//! The admission endpoint's pure core: bytes of an `admission.k8s.io/v1` AdmissionReview in, an
//! HTTP status and the answering AdmissionReview out. No I/O, so the server, the fuzz target and
//! the benchmark all call the same [`handle`], and every rule comes from [`validation::review`].
//!
//! The envelope is read field by field from a `serde_json::Value` rather than into typed structs:
//! a malformed review then still gets its `uid` echoed and a message naming the bad field, and the
//! object reaches [`validation::review`] in whatever shape it came. Only the fields read are built
//! (`REVIEW`): `userInfo`, `managedFields` and the last-applied annotation, most of a typical
//! review's bytes, are scanned and skipped, which halves the cost of a review.

use serde::Serialize;
use serde_json::{Map, Value};

use crate::text;
use crate::validation::{self, MAX_MESSAGE, Options, REVIEWED, Shape};
use crate::vocabulary::{Kind, words};

pub const API_VERSION: &str = "admission.k8s.io/v1";
pub const KIND: &str = "AdmissionReview";

/// The parts of a review that [`decode`] reads, with the object and old object only as far as
/// the rules read them.
const REVIEW: Shape = Shape::Keys(&[
    ("apiVersion", Shape::Whole),
    ("kind", Shape::Whole),
    (
        "request",
        Shape::Keys(&[
            ("uid", Shape::Whole),
            ("operation", Shape::Whole),
            ("kind", Shape::Whole),
            ("subResource", Shape::Whole),
            ("name", Shape::Whole),
            ("namespace", Shape::Whole),
            ("dryRun", Shape::Whole),
            ("object", REVIEWED),
            ("oldObject", REVIEWED),
        ]),
    ),
]);

words! {
    /// The operation of a request, as a bounded set (it labels metrics).
    pub enum Operation (as_str, parse) {
        Create = "CREATE",
        Update = "UPDATE",
        Delete = "DELETE",
        Connect = "CONNECT",
    }
}

words! {
    /// How a review ended, for the metrics label `verdict`.
    pub enum Decision (as_str, parse) {
        Allowed = "allowed",
        Denied = "denied",
        /// The body was not a usable AdmissionReview, or the object could not be read.
        Invalid = "invalid",
        /// Not reviewed: too many reviews were in flight (answered 429).
        Overloaded = "overloaded",
    }
}

/// What the server needs besides the bytes: the answer's facts for tracing and metrics. Every
/// string here comes from the request's envelope, never from the object's content.
#[derive(Clone, Debug, Default)]
pub struct Summary {
    pub uid: String,
    /// `SandboxProvider`, `SandboxLease`, or `None` for anything else (other kinds are allowed
    /// unreviewed, and an unreadable review has no kind).
    pub kind: Option<Kind>,
    pub name: String,
    /// Empty for a cluster-scoped object (a SandboxProvider).
    pub namespace: String,
    pub operation: Option<Operation>,
    pub dry_run: bool,
    pub verdict: Option<Decision>,
    /// The denial message (already sent to the client; it names fields, not values of Secrets),
    /// at most [`MAX_MESSAGE`] bytes.
    pub message: String,
    /// Problems found in the object, listed in `message` or counted there.
    pub problems: usize,
}

/// The longest `uid` answered: an apiserver's is a UUID (36 bytes).
const MAX_UID: usize = 128;

impl Summary {
    pub fn allowed(&self) -> bool {
        self.verdict == Some(Decision::Allowed)
    }

    /// Metric label for the kind: the two sandcap kinds, or `other` (including unreadable reviews,
    /// which the `invalid` verdict tells apart).
    pub fn kind_label(&self) -> &'static str {
        self.kind.map_or("other", Kind::as_str)
    }

    pub fn operation_label(&self) -> &'static str {
        self.operation.map_or("unknown", Operation::as_str)
    }
}

/// The HTTP answer: status code, JSON body, and the facts about it.
#[derive(Debug)]
pub struct Answer {
    pub status: u16,
    pub body: Vec<u8>,
    pub outcome: Summary,
}

/// Decodes one AdmissionReview and answers it. Never panics: every malformed input is a 400 with
/// an AdmissionReview body whose `status.message` says what was wrong.
pub fn handle(body: &[u8], options: &Options) -> Answer {
    let mut outcome = Summary::default();
    let response = match decode(body, &mut outcome) {
        Ok(request) => answer(request, options, &mut outcome),
        Err(malformed) => {
            outcome.verdict = Some(Decision::Invalid);
            outcome.message = text::clip(&malformed.to_string(), MAX_MESSAGE);
            let response = Response::deny(&outcome.uid, Status::bad_request(outcome.message.clone()));
            return finish(400, &response, outcome);
        }
    };
    finish(200, &response, outcome)
}

fn finish(status: u16, response: &Response, outcome: Summary) -> Answer {
    let review = Review { api_version: API_VERSION, kind: KIND, response };
    let body = serde_json::to_vec(&review).expect("a response of strings and booleans serializes");
    Answer { status, body, outcome }
}

/// The part of `request` the webhook reads beyond the envelope. On UPDATE the stored object is
/// read too, to ratchet ([`validation::review`]); the rules that compare it with the new one
/// (immutability) are the CRD's.
struct Request {
    object: Option<Value>,
    old_object: Option<Value>,
}

/// Why a body is not a usable AdmissionReview: the message of the 400. Of the body it quotes only
/// a wrong `apiVersion`, clipped.
#[derive(Debug, thiserror::Error)]
enum Malformed {
    #[error("the body is not JSON: {0}")]
    NotUtf8(std::str::Utf8Error),
    #[error("the body is not JSON: {0}")]
    NotJson(serde_json::Error),
    #[error("the body is not an {KIND} object")]
    NotAnObject,
    #[error("apiVersion: unsupported {0:?}, this webhook speaks {API_VERSION:?}")]
    ApiVersion(String),
    #[error("apiVersion: required ({API_VERSION:?})")]
    NoApiVersion,
    #[error("kind: must be {KIND:?}")]
    Kind,
    #[error("request: required, an object")]
    NoRequest,
    #[error("request.uid: longer than {MAX_UID} bytes")]
    UidTooLong,
    #[error("request.uid: required, a non-empty string")]
    NoUid,
    #[error("request.operation: must be CREATE, UPDATE, DELETE or CONNECT")]
    Operation,
    #[error("request.kind: required, an object")]
    NoKind,
}

fn decode(body: &[u8], outcome: &mut Summary) -> Result<Request, Malformed> {
    // serde_json refuses nesting deeper than 128 levels, so a hostile body cannot overflow the
    // stack here, and every Value handed to the rules is at most that deep.
    let body = std::str::from_utf8(body).map_err(Malformed::NotUtf8)?;
    let review = REVIEW.decode(body).map_err(Malformed::NotJson)?;
    let Value::Object(mut review) = review else {
        return Err(Malformed::NotAnObject);
    };
    match review.get("apiVersion").and_then(Value::as_str) {
        Some(API_VERSION) => {}
        Some(other) => return Err(Malformed::ApiVersion(clip(other).to_string())),
        None => return Err(Malformed::NoApiVersion),
    }
    if review.get("kind").and_then(Value::as_str) != Some(KIND) {
        return Err(Malformed::Kind);
    }
    let Some(Value::Object(mut request)) = review.remove("request") else {
        return Err(Malformed::NoRequest);
    };
    outcome.uid = match request.get("uid") {
        Some(Value::String(uid)) if uid.len() > MAX_UID => {
            outcome.uid = text::clip(uid, MAX_UID);
            return Err(Malformed::UidTooLong);
        }
        Some(Value::String(uid)) if !uid.is_empty() => uid.clone(),
        _ => return Err(Malformed::NoUid),
    };
    outcome.operation =
        Some(request.get("operation").and_then(Value::as_str).and_then(Operation::parse).ok_or(Malformed::Operation)?);
    let kind = request.get("kind").and_then(Value::as_object).ok_or(Malformed::NoKind)?;
    let (group, kind) = (string(kind, "group"), string(kind, "kind"));
    let sub_resource = string(&request, "subResource");
    // Subresources (status, scale) carry the controller's own writes, never a new declaration.
    if group == crate::api::GROUP && sub_resource.is_empty() {
        outcome.kind = Kind::from_kind(kind);
    }
    outcome.name = clip(string(&request, "name")).to_string();
    outcome.namespace = clip(string(&request, "namespace")).to_string();
    outcome.dry_run = request.get("dryRun").and_then(Value::as_bool).unwrap_or(false);
    Ok(Request { object: take_object(&mut request, "object"), old_object: take_object(&mut request, "oldObject") })
}

fn answer(request: Request, options: &Options, outcome: &mut Summary) -> Response {
    let reviewed = matches!(outcome.operation, Some(Operation::Create | Operation::Update)) && outcome.kind.is_some();
    if !reviewed {
        outcome.verdict = Some(Decision::Allowed);
        return Response::allow(&outcome.uid, Vec::new());
    }
    let Some(object) = request.object.filter(Value::is_object) else {
        let message = format!("request.object: required for {}, a JSON object", outcome.operation_label());
        outcome.verdict = Some(Decision::Invalid);
        outcome.message = message.clone();
        return Response::deny(&outcome.uid, Status::bad_request(message));
    };
    if outcome.name.is_empty() {
        // CREATE with generateName has no request.name yet; the object's metadata says more.
        outcome.name = clip(&validation::identify(&object).1).to_string();
    }
    let verdict = validation::review(&object, request.old_object.as_ref(), options);
    if verdict.allowed() {
        outcome.verdict = Some(Decision::Allowed);
        Response::allow(&outcome.uid, verdict.warnings)
    } else {
        outcome.verdict = Some(Decision::Denied);
        outcome.problems = verdict.problem_count();
        outcome.message = text::clip(&verdict.message(), MAX_MESSAGE);
        let status = Status::forbidden(outcome.message.clone());
        Response { warnings: verdict.warnings, ..Response::deny(&outcome.uid, status) }
    }
}

fn take_object(request: &mut Map<String, Value>, key: &str) -> Option<Value> {
    request.remove(key).filter(|v| !v.is_null())
}

fn string<'a>(map: &'a Map<String, Value>, key: &str) -> &'a str {
    map.get(key).and_then(Value::as_str).unwrap_or_default()
}

/// A client-chosen string echoed in answers and logs, cut to the longest name Kubernetes allows.
fn clip(s: &str) -> &str {
    text::prefix(s, 253)
}

#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct Review<'a> {
    api_version: &'static str,
    kind: &'static str,
    response: &'a Response,
}

#[derive(Serialize)]
struct Response {
    uid: String,
    allowed: bool,
    #[serde(skip_serializing_if = "Option::is_none")]
    status: Option<Status>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    warnings: Vec<String>,
}

impl Response {
    fn allow(uid: &str, warnings: Vec<String>) -> Response {
        Response { uid: uid.to_string(), allowed: true, status: None, warnings }
    }

    fn deny(uid: &str, status: Status) -> Response {
        Response { uid: uid.to_string(), allowed: false, status: Some(status), warnings: Vec::new() }
    }
}

/// A `metav1.Status` as the apiserver reads it from a denial.
#[derive(Serialize)]
struct Status {
    status: &'static str,
    code: u16,
    reason: &'static str,
    message: String,
}

impl Status {
    fn forbidden(message: String) -> Status {
        Status { status: "Failure", code: 403, reason: "Forbidden", message }
    }

    fn bad_request(message: String) -> Status {
        Status { status: "Failure", code: 400, reason: "BadRequest", message }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn review(request: Value) -> Vec<u8> {
        serde_json::to_vec(&json!({"apiVersion": API_VERSION, "kind": KIND, "request": request})).unwrap()
    }

    fn response(answer: &Answer) -> Value {
        serde_json::from_slice::<Value>(&answer.body).unwrap()["response"].clone()
    }

    fn provider() -> Value {
        json!({
            "apiVersion": "sandcap.dev/v1alpha1", "kind": "SandboxProvider", "metadata": {"name": "p"},
            "spec": {"pluginKey": "acme.p", "version": "1.0.0",
                     "worker": {"service": {"namespace": "ns", "name": "w", "port": 8080}},
                     "environmentDrivers": [{"driverKey": "k", "kind": "sandbox_provider", "displayName": "K"}]}
        })
    }

    fn request(operation: &str, object: Value) -> Value {
        json!({"uid": "u-1", "kind": {"group": "sandcap.dev", "version": "v1alpha1", "kind": "SandboxProvider"},
               "resource": {"group": "sandcap.dev", "version": "v1alpha1", "resource": "sandboxproviders"},
               "name": "p", "operation": operation, "userInfo": {}, "object": object})
    }

    #[test]
    fn other_kinds_and_deletes_are_allowed_unreviewed() {
        let mut pod = request("CREATE", json!({"kind": "Pod"}));
        pod["kind"] = json!({"group": "", "version": "v1", "kind": "Pod"});
        let answer = handle(&review(pod), &Options::default());
        assert_eq!((answer.status, response(&answer)["allowed"].clone()), (200, json!(true)));
        assert_eq!(answer.outcome.kind_label(), "other");

        let mut delete = request("DELETE", Value::Null);
        delete["oldObject"] = json!({"kind": "SandboxProvider"});
        let answer = handle(&review(delete), &Options::default());
        assert!(answer.outcome.allowed());
    }

    #[test]
    fn status_subresource_writes_are_not_reviewed() {
        let mut status = request("UPDATE", json!({"spec": "not even an object"}));
        status["subResource"] = json!("status");
        assert!(handle(&review(status), &Options::default()).outcome.allowed());
    }

    #[test]
    fn a_create_without_an_object_is_a_bad_request_denial() {
        let answer = handle(&review(request("CREATE", Value::Null)), &Options::default());
        let r = response(&answer);
        assert_eq!(answer.status, 200);
        assert_eq!((r["allowed"].clone(), r["status"]["code"].clone()), (json!(false), json!(400)));
        assert_eq!(r["uid"], "u-1");
    }

    #[test]
    fn generate_name_is_reported_when_the_request_has_no_name() {
        let mut object = provider();
        object["metadata"] = json!({"generateName": "p-"});
        let mut req = request("CREATE", object);
        req["name"] = json!("");
        assert_eq!(handle(&review(req), &Options::default()).outcome.name, "p-");
    }

    #[test]
    fn an_allowed_provider_has_no_status() {
        let answer = handle(&review(request("CREATE", provider())), &Options::default());
        let r = response(&answer);
        assert_eq!(r, json!({"uid": "u-1", "allowed": true}));
    }
}
