//! `serve --config FILE`: a TOML file whose keys are `serve`'s long flags.
//!
//! The file only supplies what the command line and the environment leave unset, so the order is
//! flags > environment > file > built-in defaults. The file is turned into flags before clap parses, so
//! every value goes through the same validation as when typed. Keys that are not flags are refused.

use std::ffi::OsString;

use anyhow::{Context, bail};
use clap::CommandFactory;

/// Subcommands that accept `--config`.
const CONFIGURABLE: &[&str] = &["serve"];

/// Returns `argv` with the config file's settings added as flags, or `argv` unchanged without `--config`.
pub(super) fn expand(argv: Vec<OsString>) -> anyhow::Result<Vec<OsString>> {
    // The subcommand is the first word that is not a flag: global flags (`--log-json`) may come before it.
    let Some(at) = argv.iter().skip(1).position(|a| !a.to_str().is_some_and(|s| s.starts_with('-'))) else {
        return Ok(argv);
    };
    let Some(sub) = argv[at + 1].to_str() else { return Ok(argv) };
    if !CONFIGURABLE.contains(&sub) {
        return Ok(argv);
    }
    let Some(path) = config_path(&argv[at + 2..]) else { return Ok(argv) };
    let text = std::fs::read_to_string(&path).with_context(|| format!("reading config file {}", path.display()))?;
    let table: toml::Table = text.parse().with_context(|| format!("parsing config file {}", path.display()))?;
    let extra = flags_from_table(sub, &table, &argv).with_context(|| format!("in config file {}", path.display()))?;
    let mut out = argv;
    out.extend(extra);
    Ok(out)
}

/// Finds `--config FILE` among the subcommand's arguments, else takes `HUBALIGN_CONFIG`.
fn config_path(args: &[OsString]) -> Option<std::path::PathBuf> {
    let mut args = args.iter().filter_map(|a| a.to_str());
    while let Some(a) = args.next() {
        if a == "--config" {
            return args.next().map(Into::into);
        }
        if let Some(p) = a.strip_prefix("--config=") {
            return Some(p.into());
        }
    }
    std::env::var_os("HUBALIGN_CONFIG").filter(|p| !p.is_empty()).map(Into::into)
}

fn given_on_command_line(argv: &[OsString], long: &str) -> bool {
    let flag = format!("--{long}");
    let with_value = format!("--{long}=");
    argv.iter().filter_map(|a| a.to_str()).any(|a| a == flag || a.starts_with(&with_value))
}

fn flags_from_table(sub: &str, table: &toml::Table, argv: &[OsString]) -> anyhow::Result<Vec<OsString>> {
    let mut cli = super::Cli::command();
    cli.build(); // propagates global flags such as --log-json into the subcommand
    let Some(command) = cli.find_subcommand(sub) else { bail!("no subcommand {sub}") };
    let mut out = Vec::new();
    for (key, value) in table {
        let Some(arg) = command.get_arguments().find(|a| a.get_long() == Some(key.as_str())) else {
            bail!("unknown key `{key}`: keys are the long flags of `hubalign {sub} --help`, without the dashes");
        };
        if key == "config" {
            bail!("`config` cannot name another config file");
        }
        let env_set = arg.get_env().is_some_and(|e| std::env::var_os(e).is_some_and(|v| !v.is_empty()));
        if given_on_command_line(argv, key) || env_set {
            continue;
        }
        push_value(&mut out, key, value)?;
    }
    Ok(out)
}

fn push_value(out: &mut Vec<OsString>, key: &str, value: &toml::Value) -> anyhow::Result<()> {
    let flag = format!("--{key}");
    match value {
        toml::Value::Boolean(true) => out.push(flag.into()),
        toml::Value::Boolean(false) => {}
        toml::Value::Array(items) => {
            for item in items {
                if matches!(item, toml::Value::Array(_) | toml::Value::Table(_) | toml::Value::Boolean(_)) {
                    bail!("`{key}`: list items must be strings or numbers");
                }
                push_value(out, key, item)?;
            }
        }
        toml::Value::String(s) => out.extend([flag.into(), s.into()]),
        toml::Value::Integer(i) => out.extend([flag.into(), i.to_string().into()]),
        toml::Value::Float(f) => out.extend([flag.into(), f.to_string().into()]),
        toml::Value::Datetime(_) | toml::Value::Table(_) => {
            bail!("`{key}`: expected a string, number, boolean or list")
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;

    fn argv(args: &[&str]) -> Vec<OsString> {
        args.iter().map(OsString::from).collect()
    }

    fn table(text: &str) -> toml::Table {
        text.parse().unwrap()
    }

    #[test]
    fn file_values_become_flags_and_command_line_flags_win() {
        let cmd = argv(&["hubalign", "serve", "--workers", "3"]);
        let t = table("workers = 1\ninterval = 60\nfilter = [\"mlx\", \"text-generation\"]\nlisten = \"0.0.0.0:80\"");
        let flags = flags_from_table("serve", &t, &cmd).unwrap();
        let flags: Vec<_> = flags.iter().map(|f| f.to_str().unwrap()).collect();
        assert_eq!(
            flags,
            ["--filter", "mlx", "--filter", "text-generation", "--interval", "60", "--listen", "0.0.0.0:80"]
        );
    }

    #[test]
    fn the_file_is_read_when_global_flags_come_before_the_subcommand() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("f.toml");
        std::fs::write(&file, "workers = 4\n").unwrap();
        for args in [&["hubalign", "--log-json", "serve", "--config"][..], &["hubalign", "serve", "--config"]] {
            let mut cmd = argv(args);
            cmd.push(file.clone().into());
            let expanded = expand(cmd.clone()).unwrap();
            assert_eq!(&expanded[cmd.len()..], &argv(&["--workers", "4"])[..], "{args:?}");
        }
    }

    #[test]
    fn unknown_keys_and_nested_tables_are_refused_by_name() {
        let cmd = argv(&["hubalign", "serve"]);
        let err = flags_from_table("serve", &table("wrokers = 2"), &cmd).unwrap_err().to_string();
        assert!(err.contains("`wrokers`"), "{err}");
        let err = flags_from_table("serve", &table("[listen]\nport = 1"), &cmd).unwrap_err().to_string();
        assert!(err.contains("`listen`"), "{err}");
    }

    const EXAMPLE: &str = include_str!("../../deploy/hubalign.toml");

    #[test]
    fn the_example_file_parses_into_a_valid_serve_command() {
        let cmd = argv(&["hubalign", "serve"]);
        let mut full = cmd.clone();
        full.extend(flags_from_table("serve", &table(EXAMPLE), &cmd).unwrap());
        assert!(full.len() > 20, "{full:?}");
        if let Err(e) = super::super::Cli::try_parse_from(full) {
            panic!("{e}");
        }
    }

    #[test]
    fn the_example_file_names_every_flag_of_serve_help() {
        let mut cli = super::super::Cli::command();
        cli.build();
        let help = cli.find_subcommand_mut("serve").unwrap().render_long_help().to_string();
        let flags: Vec<&str> = help
            .lines()
            .filter_map(|l| l.trim_start().strip_prefix("--").or_else(|| l.trim_start().strip_prefix("-h, --")))
            .map(|l| l.split([' ', '<']).next().unwrap())
            .filter(|f| !matches!(*f, "help" | "config"))
            .collect();
        assert!(flags.len() >= 20, "{flags:?}");
        let keys: Vec<&str> = EXAMPLE
            .lines()
            .map(|l| l.trim_start_matches(['#', ' ']))
            .filter_map(|l| l.split_once(" = ").map(|(k, _)| k.trim()))
            .collect();
        for flag in &flags {
            assert!(keys.contains(flag), "deploy/hubalign.toml does not mention `{flag}`");
        }
        for key in &keys {
            assert!(flags.contains(key), "deploy/hubalign.toml names `{key}`, which `serve --help` does not have");
        }
    }

    #[test]
    fn booleans_are_switches() {
        let cmd = argv(&["hubalign", "serve"]);
        let flags = flags_from_table("serve", &table("pr = true"), &cmd).unwrap();
        assert_eq!(flags, argv(&["--pr"]));
        assert!(flags_from_table("serve", &table("pr = false"), &cmd).unwrap().is_empty());
    }
}
