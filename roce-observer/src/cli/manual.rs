//! Man pages: clap's rendering of the command line (name, synopsis, description, options by
//! heading), followed by the sections clap does not know: EXAMPLES, EXIT STATUS, ENVIRONMENT
//! and, for `run`, the terminal UI's keys.

use std::{io::Write as _, path::Path};

use anyhow::Context as _;

use super::exit::EXIT_STATUSES;

/// The terminal UI's keys, as the man pages list them: the table the TUI's help popup, footer
/// and key handling follow, and `?` that opens that help.
fn tui_keys() -> Vec<(&'static str, &'static str)> {
    let mut keys = crate::tui::view::KEYS.to_vec();
    keys.push(("?", "show or hide the help"));
    keys
}

/// Environment variables the command reads.
const ENVIRONMENT: [(&str, &str); 2] = [
    (
        "NO_COLOR",
        "when set and not empty, the terminal UI draws without colour unless --color always is \
         given (no-color.org); problems keep their ! marks",
    ),
    (
        "ROCE_OBSERVER_IFACES, ROCE_OBSERVER_ARGS",
        "read by the systemd unit from /etc/default/roce-observer: the interfaces (-i) and any \
         further run options; the program itself does not read them",
    ),
];

/// Examples per page (`roce-observer` is the top page).
fn examples(page: &str) -> &'static [(&'static str, &'static str)] {
    match page {
        "roce-observer-run" => &[
            (
                "roce-observer run --capture tests/fixtures/mixed_demo.pcap",
                "replay a bundled capture in the terminal UI (no privileges needed)",
            ),
            (
                "sudo roce-observer run -i eth1,eth2",
                "watch two interfaces live: XDP on ingress, TC on egress",
            ),
            (
                "sudo roce-observer run -i eth1 --no-tui --duration 60 --json > report.json",
                "one minute, then one JSON document",
            ),
            (
                "sudo roce-observer run -i eth1 --metrics 9470 --log-dir /var/log/roce-observer",
                "a long-running service: Prometheus on 127.0.0.1:9470, rotating JSON Lines",
            ),
            (
                "tcpdump -i eth1 -w - udp port 4791 | roce-observer run --capture -",
                "a live stream from a host whose NIC handles RoCE where XDP cannot see it",
            ),
        ],
        "roce-observer-analyze" => &[
            (
                "roce-observer analyze tests/fixtures/mixed_demo.pcap",
                "flows, PFC, ECMP and alerts as tables",
            ),
            (
                "roce-observer analyze trace.pcapng --since 10 --until 12.5",
                "only the frames from 10 s to 12.5 s after the capture's first frame",
            ),
            (
                "roce-observer analyze trace.pcap --json --fail-on 'psn_gaps>0'",
                "a CI gate: the JSON document, and exit status 3 when a PSN was lost",
            ),
            (
                "tcpdump -i mlx5_0 -w - udp port 4791 | roce-observer analyze - --report-every 5",
                "a live stream, a table every 5 s of capture time",
            ),
        ],
        "roce-observer-counters" => &[
            (
                "roce-observer counters",
                "the key RoCE counters of every RDMA device, each second",
            ),
            (
                "roce-observer counters --duration 0 --all",
                "every counter's total since the driver loaded",
            ),
            (
                "roce-observer counters --interval 10 --duration 60 --json",
                "changes over one minute as one JSON document",
            ),
        ],
        _ => &[
            (
                "roce-observer run --capture tests/fixtures/mixed_demo.pcap",
                "a first look, on a bundled capture",
            ),
            ("sudo roce-observer run -i eth1", "watch an interface live"),
            ("roce-observer help run", "the options of run"),
        ],
    }
}

/// Text for roff: `\` and a leading `.` or `'` would be read as requests, `-` as a hyphen.
fn roff(text: &str) -> String {
    let escaped = text.replace('\\', "\\e").replace('-', "\\-");
    if escaped.starts_with(['.', '\'']) {
        format!("\\&{escaped}")
    } else {
        escaped
    }
}

/// A tagged paragraph per item: the tag in bold, the text indented below it.
fn tagged(out: &mut String, title: &str, items: &[(&str, &str)]) {
    out.push_str(&format!(".SH {title}\n"));
    for (tag, text) in items {
        if tag.is_empty() {
            out.push_str(&format!(".PP\n{}\n", roff(text)));
        } else {
            out.push_str(&format!(".TP\n\\fB{}\\fR\n{}\n", roff(tag), roff(text)));
        }
    }
}

/// The sections appended to the page named `page` (`roce-observer`, `roce-observer-run`...).
pub fn extra_sections(page: &str) -> String {
    let mut out = String::new();
    if page == "roce-observer-run" {
        tagged(&mut out, "TERMINAL UI KEYS", &tui_keys());
    }
    tagged(&mut out, "EXAMPLES", examples(page));
    let statuses: Vec<(String, &str)> = EXIT_STATUSES
        .iter()
        .map(|(code, what)| (code.to_string(), *what))
        .collect();
    let statuses: Vec<(&str, &str)> = statuses.iter().map(|(c, w)| (c.as_str(), *w)).collect();
    tagged(&mut out, "EXIT STATUS", &statuses);
    tagged(&mut out, "ENVIRONMENT", &ENVIRONMENT);
    out
}

/// One page per visible command (the `help` command excepted), written to `dir`.
pub fn write_pages(cmd: &clap::Command, dir: &Path) -> anyhow::Result<()> {
    let mut cmd = cmd.clone().disable_help_subcommand(true);
    // Built, each subcommand knows its page name (`roce-observer-run`).
    cmd.build();
    let mut pages = vec![cmd.clone()];
    pages.extend(
        cmd.get_subcommands()
            .filter(|s| !s.is_hide_set() && s.get_name() != "help")
            .cloned(),
    );
    for page_cmd in pages {
        let man = clap_mangen::Man::new(page_cmd.clone());
        let name = man.get_filename();
        let name = name.trim_end_matches(".1").to_string();
        let path = dir.join(format!("{name}.1"));
        let mut file =
            std::fs::File::create(&path).with_context(|| format!("creating {}", path.display()))?;
        let write = |file: &mut std::fs::File| -> std::io::Result<()> {
            man.render_title(file)?;
            man.render_name_section(file)?;
            man.render_synopsis_section(file)?;
            man.render_description_section(file)?;
            man.render_options_section(file)?;
            if page_cmd.get_subcommands().next().is_some() {
                man.render_subcommands_section(file)?;
            }
            file.write_all(extra_sections(&name).as_bytes())?;
            if page_cmd.get_version().is_some() {
                man.render_version_section(file)?;
            }
            Ok(())
        };
        write(&mut file).with_context(|| format!("writing {}", path.display()))?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn roff_escapes_what_roff_would_read_as_requests() {
        assert_eq!(roff("--json"), "\\-\\-json");
        assert_eq!(roff(".hidden"), "\\&.hidden");
        assert_eq!(roff("a\\b"), "a\\eb");
    }

    #[test]
    fn run_page_has_keys_examples_statuses_and_environment() {
        let text = extra_sections("roce-observer-run");
        for section in [
            ".SH TERMINAL UI KEYS",
            ".SH EXAMPLES",
            ".SH EXIT STATUS",
            ".SH ENVIRONMENT",
        ] {
            assert!(text.contains(section), "{section}:\n{text}");
        }
        assert!(text.contains("NO_COLOR"));
        for (key, _) in crate::tui::view::KEYS {
            assert!(text.contains(&roff(key)), "{key} missing from the keys");
        }
        assert!(text.contains("\\fB2\\fR\na command\\-line error"), "{text}");
        // Only the run page has the keys: the other commands have no UI.
        assert!(!extra_sections("roce-observer-analyze").contains("KEYS"));
    }
}
