//! `deploy/openwrt/build-ipk.sh`: the OpenWrt package holds the given binary, the procd init
//! script and the example client config (a conffile, mode 0600), with the control files opkg
//! reads; it is reproducible; bad flags exit 2 naming the flag or file. Needs `sh`, `tar` and
//! `gzip` (GNU tar, as on any build machine).
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

fn scratch(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("braid-ipk-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

fn build_ipk(args: &[&str]) -> Output {
    Command::new("sh")
        .arg(repo().join("deploy/openwrt/build-ipk.sh"))
        .args(args)
        .env("SOURCE_DATE_EPOCH", "1700000000")
        .output()
        .unwrap()
}

/// Packages this build's `braid` for `x86_64` into `out`.
fn package_braid(out: &Path) -> Output {
    let binary = env!("CARGO_BIN_EXE_braid");
    build_ipk(&[
        "--arch",
        "x86_64",
        "--binary",
        binary,
        "--out",
        out.to_str().unwrap(),
    ])
}

fn run(cmd: &str, args: &[&str], dir: &Path) -> String {
    let out = Command::new(cmd)
        .args(args)
        .current_dir(dir)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{cmd} {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).unwrap()
}

#[test]
fn the_package_holds_the_binary_init_script_and_config_with_opkg_control_files() {
    let dir = scratch("contents");
    let binary = env!("CARGO_BIN_EXE_braid");
    let out_dir = dir.join("out");
    let out = package_braid(&out_dir);
    assert!(
        out.status.success(),
        "build-ipk failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let version = env!("CARGO_PKG_VERSION");
    let ipk = out_dir.join(format!("braid_{version}-1_x86_64.ipk"));
    assert_eq!(
        String::from_utf8_lossy(&out.stdout).trim(),
        ipk.to_str().unwrap(),
        "the script prints the package's path"
    );

    // The outer archive: opkg's three members, in ipkg-build's order.
    let outer = run("tar", &["-tzf", ipk.to_str().unwrap()], &dir);
    assert_eq!(
        outer.lines().collect::<Vec<_>>(),
        ["./debian-binary", "./data.tar.gz", "./control.tar.gz"]
    );
    let unpacked = dir.join("unpacked");
    std::fs::create_dir_all(&unpacked).unwrap();
    run("tar", &["-xzf", ipk.to_str().unwrap()], &unpacked);
    assert_eq!(
        std::fs::read_to_string(unpacked.join("debian-binary")).unwrap(),
        "2.0\n"
    );

    // Control files.
    let control_dir = unpacked.join("control");
    std::fs::create_dir_all(&control_dir).unwrap();
    run("tar", &["-xzf", "../control.tar.gz"], &control_dir);
    let control = std::fs::read_to_string(control_dir.join("control")).unwrap();
    for field in [
        "Package: braid\n".to_string(),
        format!("Version: {version}-1\n"),
        "Architecture: x86_64\n".to_string(),
        "License: Apache-2.0\n".to_string(),
    ] {
        assert!(
            control.contains(&field),
            "control lacks {field:?}:\n{control}"
        );
    }
    let size: u64 = control
        .lines()
        .find_map(|l| l.strip_prefix("Installed-Size: "))
        .expect("Installed-Size")
        .parse()
        .unwrap();
    let binary_len = std::fs::metadata(binary).unwrap().len();
    assert!(
        size >= binary_len,
        "Installed-Size {size} is less than the binary's {binary_len} bytes"
    );
    assert_eq!(
        std::fs::read_to_string(control_dir.join("conffiles")).unwrap(),
        "/etc/braid/client.toml\n"
    );
    let listing = run("tar", &["-tvzf", "../control.tar.gz"], &control_dir);
    for script in ["./postinst", "./prerm"] {
        assert!(
            listing
                .lines()
                .any(|l| l.starts_with("-rwxr-xr-x 0/0") && l.ends_with(script)),
            "{script} is not an executable file owned by root:\n{listing}"
        );
    }

    // The payload: modes, owners and bytes.
    let data_dir = unpacked.join("data");
    std::fs::create_dir_all(&data_dir).unwrap();
    let listing = run("tar", &["-tvzf", "../data.tar.gz"], &data_dir);
    for (mode, path) in [
        ("-rwxr-xr-x 0/0", "./usr/bin/braid"),
        ("-rwxr-xr-x 0/0", "./etc/init.d/braid"),
        ("-rw------- 0/0", "./etc/braid/client.toml"),
        ("drwx------ 0/0", "./etc/braid/"),
    ] {
        assert!(
            listing
                .lines()
                .any(|l| l.starts_with(mode) && l.ends_with(path)),
            "no {path} with {mode}:\n{listing}"
        );
    }
    assert_eq!(listing.lines().filter(|l| l.starts_with('-')).count(), 3);
    run("tar", &["-xzf", "../data.tar.gz"], &data_dir);
    for (packed, source) in [
        ("usr/bin/braid", PathBuf::from(binary)),
        ("etc/init.d/braid", repo().join("deploy/braid.init")),
        ("etc/braid/client.toml", repo().join("config/client.toml")),
    ] {
        assert!(
            std::fs::read(data_dir.join(packed)).unwrap() == std::fs::read(&source).unwrap(),
            "{packed} differs from {}",
            source.display()
        );
    }
    let version_out = Command::new(data_dir.join("usr/bin/braid"))
        .arg("--version")
        .output()
        .unwrap();
    assert!(version_out.status.success());
    assert!(String::from_utf8_lossy(&version_out.stdout).contains(version));

    // Reproducible: the same inputs give the same bytes.
    let again_dir = dir.join("again");
    let again = package_braid(&again_dir);
    assert!(again.status.success());
    assert!(
        std::fs::read(&ipk).unwrap()
            == std::fs::read(again_dir.join(format!("braid_{version}-1_x86_64.ipk"))).unwrap(),
        "two builds of the same inputs differ"
    );
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn bad_flags_exit_2_naming_the_flag_or_file() {
    let dir = scratch("bad");
    let out = dir.to_str().unwrap();
    let binary = env!("CARGO_BIN_EXE_braid");
    let missing = dir.join("no-such-binary");
    let missing = missing.to_str().unwrap();
    let cases: [(&[&str], &str); 7] = [
        (&["--binary", binary, "--out", out], "--arch is required"),
        (
            &["--arch", "x86 64", "--binary", binary, "--out", out],
            "--arch 'x86 64'",
        ),
        (
            &["--arch", "-x86", "--binary", binary, "--out", out],
            "--arch '-x86'",
        ),
        (
            &["--arch", "x86_64", "--out", out],
            "--target RUST_TARGET or --binary FILE",
        ),
        (
            &["--arch", "x86_64", "--binary", missing, "--out", out],
            &format!("--binary '{missing}': no such file"),
        ),
        (
            &["--arch", "x86_64", "--target", "x", "--binary", binary],
            "not both",
        ),
        (
            &["--arch", "x86_64", "--bogus"],
            "unknown argument '--bogus'",
        ),
    ];
    for (args, want) in cases {
        let result = build_ipk(args);
        let stderr = String::from_utf8_lossy(&result.stderr);
        assert_eq!(result.status.code(), Some(2), "{args:?}: {stderr}");
        assert!(stderr.contains(want), "{args:?}: {stderr:?} lacks {want:?}");
    }
    assert_eq!(
        std::fs::read_dir(&dir).unwrap().count(),
        0,
        "a failed run wrote a package"
    );
    std::fs::remove_dir_all(&dir).unwrap();
}
