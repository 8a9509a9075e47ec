//! What a mirror carries of a source anyone could have pushed: only what an MLX loader reads, a card that
//! renders nothing of the source as markup, and no claim the mirror cannot vouch for.

use serde_json::Value;

use super::publish::{audit, job, jobs, manifest, worker};
use crate::sim::world::{World, bundle, start_on};
use crate::support::text;

/// A left-out file whose name is Markdown and HTML.
const HOSTILE_NAME: &str = "x` <img src=x onerror=alert(1)> [Download verified weights](http:evil.example) `y.txt";
/// Bytes of the opaque `junk.bin`: more than everything the mirror carries.
const JUNK: usize = 8 << 20;

/// `evil/tiny-q4`: the q4 fixture with pickles, code, an archive-sized blob, a config pointing to remote
/// code, a file named as markup, claim tags and a licence link to a phishing host.
fn hostile_source() -> World {
    let root = tempfile::tempdir().unwrap();
    let sidecar = serde_json::json!({
        "library_name": "mlx",
        "license": "other",
        "downloads": 1000,
        "tags": ["official", "verified", "meta-llama", "text-generation-inference", "endpoints_compatible",
                 "not-for-all-audiences"],
        "cardData": {
            "license": "other", "license_name": "evil-license", "license_link": "https://evil.example/terms",
            "language": ["en", "<b>bold</b>"], "datasets": ["evil/claimed-data"], "pipeline_tag": "text-generation",
            "tags": ["official", "verified", "meta-llama", "text-generation-inference", "endpoints_compatible",
                     "not-for-all-audiences", "mlx"],
        },
    });
    bundle(root.path(), "evil/tiny-q4", "mlx_lm/q4", &sidecar.to_string());
    let dir = root.path().join("models/evil/tiny-q4");
    for (name, bytes) in [
        ("pytorch_model.bin", b"\x80\x04pickle".to_vec()),
        ("optimizer.pt", b"\x80\x04pickle".to_vec()),
        ("training_args.pkl", b"\x80\x04pickle".to_vec()),
        ("modeling_evil.py", b"import os; os.system('echo owned')\n".to_vec()),
        ("junk.bin", vec![0x5a; JUNK]),
        (HOSTILE_NAME, b"x".to_vec()),
    ] {
        std::fs::write(dir.join(name), bytes).unwrap();
    }
    std::fs::create_dir_all(dir.join("original")).unwrap();
    std::fs::write(dir.join("original/consolidated.00.pth"), b"\x80\x04pickle").unwrap();
    let mut config: Value = serde_json::from_slice(&std::fs::read(dir.join("config.json")).unwrap()).unwrap();
    config["auto_map"] = serde_json::json!({"AutoModelForCausalLM": "evil/code--modeling_evil.EvilForCausalLM"});
    std::fs::write(dir.join("config.json"), serde_json::to_vec_pretty(&config).unwrap()).unwrap();
    start_on(root, |_| {})
}

#[test]
fn a_mirror_carries_only_what_a_loader_reads_and_its_card_renders_nothing_of_the_source() {
    let world = hostile_source();
    let dir = tempfile::tempdir().unwrap();
    let (db, work) = (dir.path().join("a.db"), dir.path().join("work"));
    audit(&world.endpoint(), &db);
    let served_before = world.counters().bytes_served;
    let out = worker(&world.endpoint(), &db, &work, &["worker", "--once"]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out));
    // Every line the job logs, on the batch runtime and its blocking threads too, carries the job's span (the
    // pass that queues the jobs and checks the mirrors is no job's).
    let log = String::from_utf8_lossy(&out.stderr);
    let of_the_job = |l: &&str| l.contains(" hubalign::repack") && !l.contains(" hubalign::repack::queue::lifecycle");
    let job_lines: Vec<&str> = log.lines().filter(of_the_job).collect();
    assert!(job_lines.len() >= 5, "{log}");
    assert!(job_lines.iter().all(|l| l.contains("job{job.id=1 repo.id=evil/tiny-q4 repo.sha=")), "{log}");
    let jobs = jobs(&db);
    let j = job(&jobs, "evil/tiny-q4");
    assert_eq!(j.state, "published", "{j:?}");
    let mirror = j.target_repo.clone().unwrap();

    // The files: the shard, its index, the configs, the tokenizer; the card and the manifest.
    let sim = &world.hub.as_ref().unwrap().sim;
    let head = sim.repos().get(&mirror).unwrap().head().unwrap().clone();
    let files: Vec<&str> = head.files.keys().map(String::as_str).filter(|f| *f != ".gitattributes").collect();
    assert_eq!(
        files,
        [
            "MEI_ALIGN_MANIFEST.json",
            "README.md",
            "config.json",
            "model.safetensors",
            "model.safetensors.index.json",
            "tokenizer.json",
            "tokenizer_config.json"
        ]
    );
    let served = world.counters().bytes_served - served_before;
    assert!(served < JUNK as u64, "what is left out is not downloaded: {served} bytes served");

    // The config keeps what a loader reads, without its pointer to code.
    let url = format!("{}/{mirror}/resolve/main/config.json", world.endpoint());
    let config: Value = world.runtime.block_on(async { reqwest::get(&url).await.unwrap().json().await.unwrap() });
    assert!(config.get("auto_map").is_none(), "{config}");
    assert_eq!(config["model_type"], "llama");

    // The manifest lists what was left out and why, and what was edited.
    let manifest = manifest(&world, &mirror);
    let left: Vec<&str> =
        manifest["left_out"].as_array().unwrap().iter().map(|f| f["file"].as_str().unwrap()).collect();
    for name in ["pytorch_model.bin", "optimizer.pt", "training_args.pkl", "modeling_evil.py", "junk.bin", HOSTILE_NAME]
    {
        assert!(left.contains(&name), "{name} not listed as left out: {left:?}");
    }
    assert!(left.contains(&"original/consolidated.00.pth"), "{left:?}");
    assert_eq!(manifest["edited"], serde_json::json!([{"file": "config.json", "removed": ["auto_map"]}]));

    // The card: nothing of the source as markup, no claim, no link to the phishing host.
    let url = format!("{}/{mirror}/resolve/main/README.md", world.endpoint());
    let card = world.runtime.block_on(async { reqwest::get(&url).await.unwrap().text().await.unwrap() });
    for markup in ["<img", "<b>", "](http:evil", "evil.example/terms", "evil/claimed-data"] {
        assert!(!card.contains(markup), "{markup} in the card:\n{card}");
    }
    assert!(card.contains("&lt;img src\\=x onerror\\=alert\\(1\\)&gt;"), "the name, escaped:\n{card}");
    assert!(card.contains("`auto_map`") && card.contains("`pytorch_model.bin`"), "{card}");
    let front = card.split("---\n").nth(1).unwrap();
    let tags: Vec<&str> = front.split("tags:\n").nth(1).unwrap().lines().map(|l| l.trim_start_matches("- ")).collect();
    assert_eq!(tags, ["\"mlx\"", "\"safetensors\"", "\"aligned-safetensors\"", "\"not-for-all-audiences\""]);
    assert!(front.contains("language:\n- \"en\"\n"), "{front}");
    assert!(!front.contains("license_link"), "{front}");
}

#[test]
fn a_shard_named_as_markup_is_never_mirrored() {
    let root = tempfile::tempdir().unwrap();
    bundle(root.path(), "evil/odd-shard", "mlx_lm/q4", r#"{"library_name":"mlx","downloads":1000}"#);
    let dir = root.path().join("models/evil/odd-shard");
    let odd = "x` <img src=x onerror=alert(1)> `y.safetensors";
    std::fs::rename(dir.join("model.safetensors"), dir.join(odd)).unwrap();
    std::fs::remove_file(dir.join("model.safetensors.index.json")).unwrap();
    let world = start_on(root, |_| {});
    let tmp = tempfile::tempdir().unwrap();
    let (db, work) = (tmp.path().join("a.db"), tmp.path().join("work"));
    audit(&world.endpoint(), &db);
    let out = worker(&world.endpoint(), &db, &work, &["worker", "--once"]);
    assert_eq!(out.status.code(), Some(4), "a failed job: {}", text(&out));
    let jobs = jobs(&db);
    let j = job(&jobs, "evil/odd-shard");
    assert_eq!(j.state, "failed", "{j:?}");
    assert!(j.reason.as_deref().unwrap_or("").contains("a name no writer produces"), "{j:?}");
    let sim = &world.hub.as_ref().unwrap().sim;
    assert!(!sim.repos().keys().any(|k| k.contains("aligned")), "nothing published");
}
