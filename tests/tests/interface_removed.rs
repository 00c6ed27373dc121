//! `run -i` on a veth that is deleted mid-run: the observer notices it at the next interval,
//! reports it (summary `interfaces_up`, a message naming the interface) and exits with status 1
//! so that the service unit restarts it, instead of running on with frozen counters.

use std::time::Duration;

use integration_tests::{
    netns::{Observer, VethNs},
    require_root,
};
use serde_json::Value;

#[test]
#[ignore = "kernel test: needs root (BPF, network namespaces)"]
fn a_removed_interface_ends_the_run_with_an_error_that_names_it() {
    require_root();
    let ns = VethNs::new().expect("namespace with a veth pair");
    let observer = Observer::start(&ns, &["-i", &ns.a, "--json", "--interval", "0.2"])
        .expect("observer attaches");
    std::thread::sleep(Duration::from_millis(500));
    let del = ns
        .exec("ip")
        .args(["link", "del", &ns.a])
        .status()
        .expect("ip runs");
    assert!(del.success(), "ip link del {}", ns.a);
    let (status, stdout, stderr) = observer
        .wait_output(Duration::from_secs(10))
        .expect("the observer ends by itself");
    assert_eq!(status.code(), Some(1), "{stderr}");
    assert!(
        stderr.contains(&format!("interface `{}` removed while watched", ns.a)),
        "{stderr}"
    );
    let doc: Value = serde_json::from_str(&stdout).expect("the final document is printed");
    assert_eq!(doc["summary"]["interfaces_up"][&ns.a], false, "{stdout}");
    eprintln!("removed interface: noticed, reported, exit status 1");
}
