//! `crds/` (what admins `kubectl apply`) and `charts/sandcap/crds/` (what `helm install` applies)
//! must both hold exactly what `sandcap crds` prints, or a cluster would run with a schema the
//! binary does not expect. Regenerate both with `SANDCAP_UPDATE_CRDS=1 cargo test --test crds`.

use std::collections::BTreeSet;
use std::fs;
use std::path::Path;

const CRD_DIRS: [&str; 2] = ["crds", "charts/sandcap/crds"];

fn yaml_files(dir: &Path) -> BTreeSet<String> {
    let Ok(entries) = fs::read_dir(dir) else {
        return BTreeSet::new();
    };
    entries
        .filter_map(|e| e.ok()?.file_name().into_string().ok())
        .filter(|name| name.ends_with(".yaml") || name.ends_with(".yml"))
        .collect()
}

#[test]
fn crd_directories_match_sandcap_crds() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let update = std::env::var("SANDCAP_UPDATE_CRDS").is_ok_and(|v| v == "1");
    let generated = sandcap::cli::crds();
    let expected: BTreeSet<String> = generated.iter().map(|(file, _)| file.clone()).collect();
    let mut stale = Vec::new();

    for dir in CRD_DIRS.map(|d| root.join(d)) {
        if update {
            fs::create_dir_all(&dir).unwrap();
        }
        for (file, yaml) in &generated {
            let path = dir.join(file);
            if fs::read_to_string(&path).ok().as_deref() == Some(yaml.as_str()) {
                continue;
            }
            if update {
                fs::write(&path, yaml).unwrap();
            } else {
                stale.push(format!("{} differs from `sandcap crds`", path.display()));
            }
        }
        // A CRD that was renamed or dropped must not linger: Helm and `kubectl apply -f` would
        // still install it.
        for extra in yaml_files(&dir).difference(&expected) {
            let path = dir.join(extra);
            if update {
                fs::remove_file(&path).unwrap();
            } else {
                stale.push(format!("{} is not produced by `sandcap crds`", path.display()));
            }
        }
    }

    assert!(
        stale.is_empty(),
        "stale CRD files:\n  {}\nregenerate with: SANDCAP_UPDATE_CRDS=1 cargo test --test crds",
        stale.join("\n  ")
    );
}
