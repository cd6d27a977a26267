//! The `providers` check: how many SandboxProviders are Ready, and a warning for each whose worker
//! runs another version of the plugin it pins (the host's image moved to a new plugin version): it
//! grants nothing until its `spec.version` follows, and the line names both versions and the
//! command that follows, for the admin to run once the change is reviewed. A provider not Ready
//! for another reason is its author's or its worker's state, not sandcap's: counted, not warned of
//! (`kubectl get sandboxproviders` and `explain provider` say why). It never fails.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition;
use kube::Client;
use kube::api::DynamicObject;
use kube::core::ApiResource;
use serde_json::Value;

use super::args::{CheckArgs, Level, Line};
use super::workload_verdicts::plural;
use crate::cli::cluster::list_pages;
use sandcap_core::api::SandboxProvider;
use sandcap_core::vocabulary::ConditionType;

/// How many providers on another plugin version the line names.
const NAMED: usize = 5;

pub async fn providers(client: &Client, args: &CheckArgs) -> Line {
    let resource = ApiResource::erase::<SandboxProvider>(&());
    let mut seen = Vec::new();
    let each = |page: Vec<DynamicObject>| seen.extend(page.iter().map(Seen::of));
    if let Err(e) = list_pages(client, &resource, args.cluster.request_timeout, each).await {
        return Line::fail(e);
    }
    verdict(&seen)
}

/// What the check reads of one provider.
#[derive(Debug, Default, PartialEq)]
struct Seen {
    name: String,
    /// Its `Ready` condition's status and reason; `None` before its first status.
    ready: Option<(bool, String)>,
    plugin_key: String,
    version: String,
    /// The plugin its worker reported: id and version.
    runs: Option<(String, String)>,
}

impl Seen {
    fn of(object: &DynamicObject) -> Seen {
        let text = |value: Option<&Value>| value.and_then(Value::as_str).unwrap_or_default().to_string();
        let (spec, status) = (object.data.get("spec"), object.data.get("status"));
        let conditions: Vec<Condition> = status
            .and_then(|s| s.get("conditions"))
            .and_then(|c| serde_json::from_value(c.clone()).ok())
            .unwrap_or_default();
        let ready = conditions.iter().find(|c| c.type_ == ConditionType::Ready.as_str());
        let plugin = status.and_then(|s| s.get("worker")).and_then(|w| w.get("plugin"));
        Seen {
            name: object.metadata.name.clone().unwrap_or_default(),
            ready: ready.map(|c| (c.status == "True", c.reason.clone())),
            plugin_key: text(spec.and_then(|s| s.get("pluginKey"))),
            version: text(spec.and_then(|s| s.get("version"))),
            runs: plugin.map(|p| (text(p.get("id")), text(p.get("version")))),
        }
    }

    /// The version its worker runs, when that is another version of the plugin it pins.
    fn moved_to(&self) -> Option<&str> {
        let (id, version) = self.runs.as_ref()?;
        (*id == self.plugin_key && *version != self.version).then_some(version.as_str())
    }

    /// What follows its worker's version.
    fn follow(&self, version: &str) -> String {
        let (name, pinned, id) = (&self.name, &self.version, &self.plugin_key);
        format!(
            "{name}: its worker runs version {version} of {id}, the provider pins {pinned}, so every lease of it is \
             all-off; review `sandcap explain provider {name}`, then `kubectl patch sandboxprovider {name} --type \
             merge -p '{{\"spec\":{{\"version\":\"{version}\"}}}}'`"
        )
    }
}

fn verdict(seen: &[Seen]) -> Line {
    let ready = seen.iter().filter(|s| s.ready.as_ref().is_some_and(|(ready, _)| *ready)).count();
    let total = plural(seen.len(), "SandboxProvider", "SandboxProviders");
    let moved: Vec<String> = seen.iter().filter_map(|s| Some(s.follow(s.moved_to()?))).collect();
    if moved.is_empty() {
        let others = seen.len() - ready;
        let others =
            if others > 0 { format!(" ({others} not: kubectl get sandboxproviders says why)") } else { String::new() };
        return Line::ok(format!(
            "{total}, {ready} Ready{others}; no worker runs another version than its provider pins"
        ));
    }
    let more = moved.len().saturating_sub(NAMED);
    let more = if more > 0 { format!("; and {more} more") } else { String::new() };
    let named: Vec<&str> = moved.iter().take(NAMED).map(String::as_str).collect();
    Line::new(Level::Warn, format!("{} of {total} on another plugin version: {}{more}", moved.len(), named.join("; ")))
}

#[cfg(test)]
mod tests {
    use super::*;
    use sandcap_core::vocabulary::ConditionReason;

    /// The reason a worker that is another plugin gives (the `WorkerVerified` condition's).
    fn mismatch() -> String {
        ConditionReason::PluginIdentityMismatch.as_str().to_string()
    }

    fn seen(name: &str, ready: Option<(bool, &str)>, runs: Option<(&str, &str)>) -> Seen {
        Seen {
            name: name.into(),
            ready: ready.map(|(r, why)| (r, why.into())),
            plugin_key: "paperclip.kubernetes-sandbox-provider".into(),
            version: "0.2.0".into(),
            runs: runs.map(|(id, v)| (id.into(), v.into())),
        }
    }

    #[test]
    fn providers_on_their_pinned_version_are_ok_ready_or_not() {
        let ready =
            seen("k8s", Some((true, "CapabilitiesResolved")), Some(("paperclip.kubernetes-sandbox-provider", "0.2.0")));
        let down = seen("down", Some((false, "WorkerNotVerified")), None);
        let line = verdict(&[ready, down, seen("new", None, None)]);
        assert_eq!(line.level, Level::Ok);
        assert!(
            line.message.starts_with("3 SandboxProviders, 1 Ready (2 not: kubectl get sandboxproviders says why)"),
            "{}",
            line.message
        );
        assert_eq!(verdict(&[]).level, Level::Ok);
    }

    #[test]
    fn a_worker_on_another_version_names_both_and_the_command_that_follows() {
        let id = "paperclip.kubernetes-sandbox-provider";
        let upgraded = seen("k8s", Some((false, "WorkerNotVerified")), Some((id, "0.3.0")));
        let line = verdict(&[upgraded, seen("other", Some((true, "CapabilitiesResolved")), None)]);
        assert_eq!(line.level, Level::Warn);
        for part in [
            "1 of 2 SandboxProviders on another plugin version: k8s: its worker runs version 0.3.0 of",
            "the provider pins 0.2.0",
            r#"kubectl patch sandboxprovider k8s --type merge -p '{"spec":{"version":"0.3.0"}}'"#,
        ] {
            assert!(line.message.contains(part), "{part} in {}", line.message);
        }
        // Another plugin altogether is not a version to follow.
        let other = seen("k8s", Some((false, &mismatch())), Some(("someone.else", "0.3.0")));
        assert_eq!(verdict(&[other]).level, Level::Ok);
    }

    #[test]
    fn at_most_five_are_named() {
        let id = "paperclip.kubernetes-sandbox-provider";
        let many: Vec<Seen> = (0..7).map(|i| seen(&format!("p{i}"), None, Some((id, "0.3.0")))).collect();
        let line = verdict(&many);
        assert!(
            line.message.starts_with("7 of 7 SandboxProviders on another plugin version: p0: "),
            "{}",
            line.message
        );
        assert!(line.message.ends_with("; and 2 more"), "{}", line.message);
        assert_eq!(line.message.matches("kubectl patch").count(), 5);
    }

    #[test]
    fn what_is_read_of_a_stored_provider() {
        let object: DynamicObject = serde_json::from_value(serde_json::json!({
            "apiVersion": "sandcap.dev/v1alpha1", "kind": "SandboxProvider", "metadata": {"name": "k8s"},
            "spec": {"pluginKey": "p", "version": "1.0.0"},
            "status": {"conditions": [{"type": "Ready", "status": "False", "reason": "WorkerNotVerified",
                "message": "", "lastTransitionTime": "2030-01-01T00:00:00Z"}],
                "worker": {"plugin": {"id": "p", "version": "1.1.0"}}}
        }))
        .expect("an object");
        let expected = Seen {
            name: "k8s".into(),
            ready: Some((false, "WorkerNotVerified".into())),
            plugin_key: "p".into(),
            version: "1.0.0".into(),
            runs: Some(("p".into(), "1.1.0".into())),
        };
        assert_eq!(Seen::of(&object), expected);
    }
}
