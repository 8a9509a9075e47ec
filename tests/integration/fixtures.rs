//! `scan` agrees, shard by shard, with an independent Python parser and with the reference reader's verdict.

use serde_json::Value;

use crate::support::{fixture, run, stdout};

#[test]
fn scan_matches_the_independent_parser_on_every_fixture() {
    let expected: serde_json::Map<String, Value> =
        serde_json::from_slice(&std::fs::read(fixture("expected.json")).unwrap()).unwrap();
    assert!(expected.len() >= 20, "expected.json lists {} fixtures", expected.len());
    for (rel, want) in &expected {
        let out = run(&["scan", "--format", "json", fixture(rel).to_str().unwrap()]);
        let text = stdout(&out);
        let got: Value = serde_json::from_str(text.trim()).unwrap_or_else(|e| panic!("{rel}: {e}: {text}"));
        let valid = want["valid"].as_bool().unwrap();
        assert_eq!(got["verdict"] == "invalid", !valid, "{rel}: reference reader says valid={valid}, we say {got}");
        if valid {
            for field in [
                "header_len",
                "data_start",
                "data_start_mod8",
                "tensors",
                "misaligned_tensors",
                "misaligned_bytes",
                "writer",
            ] {
                assert_eq!(got[field], want[field], "{rel}: {field}");
            }
            // The independent parser's verdict follows what a loader does: aligned when it copies nothing.
            assert_eq!(got["verdict"], want["verdict"], "{rel}");
            assert_eq!(got["data_start_aligned"], want["data_start_mod8"] == 0, "{rel}");
            assert_eq!(got["error"], Value::Null, "{rel}");
        } else {
            assert!(got["error"].as_str().is_some_and(|e| !e.is_empty()), "{rel}: invalid without a reason");
        }
        let code = out.status.code().unwrap();
        let want_code = match got["verdict"].as_str().unwrap() {
            "aligned" => 0,
            "invalid" => 3,
            _ => 1,
        };
        assert_eq!(code, want_code, "{rel}: exit code");
    }
}

#[test]
fn malformed_fixtures_name_their_rule() {
    let cases = [
        ("truncated", "truncated"),
        ("bad_json", "not valid safetensors JSON"),
        ("huge_n", "exceeds the 100,000,000-byte limit"),
        ("gap", "gap of 4 bytes"),
        ("overlap", "overlaps the previous tensor"),
        ("shape_mismatch", "shape × dtype needs"),
        ("unknown_dtype", "unknown dtype `F128`"),
        ("trailing_bytes", "unindexed bytes after the last tensor"),
        ("nul_padding", "trailing characters"),
    ];
    for (name, needle) in cases {
        let path = fixture(&format!("malformed/{name}.safetensors"));
        let out = run(&["scan", "--format", "json", path.to_str().unwrap()]);
        let got: Value = serde_json::from_str(stdout(&out).trim()).unwrap();
        let error = got["error"].as_str().unwrap_or_default();
        assert!(error.contains(needle), "{name}: `{error}` lacks `{needle}`");
    }
}
