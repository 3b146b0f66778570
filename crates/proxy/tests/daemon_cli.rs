//! The `braid client`/`server`/`status` command lines: bad configuration files exit with code 2
//! and a message naming the file and the field; `--check` validates without starting anything;
//! `--print-fingerprint` prints the pin; real
//! `curl` through both inbounds when curl is installed.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod daemon_common;

use std::path::Path;
use std::process::Command;

use daemon_common::*;

fn braid(args: &[&str]) -> std::process::Output {
    Command::new(env!("CARGO_BIN_EXE_braid"))
        .args(args)
        .output()
        .unwrap()
}

fn write(dir: &Path, name: &str, text: &str) -> String {
    std::fs::create_dir_all(dir).unwrap();
    let p = dir.join(name);
    std::fs::write(&p, text).unwrap();
    p.to_string_lossy().into_owned()
}

#[test]
fn bad_config_files_exit_2_naming_file_and_field() {
    let dir = state_dir("badconfig");
    let key = "ab".repeat(32);
    let fp = "AB:".repeat(31) + "AB";
    let client_cases = [
        (
            format!(
                "user = \"a\"\nkey = \"{key}\"\nserver_fingerprint = \"{fp}\"\n[[link]]\nname = \"w\"\nserver = \"x\"\n"
            ),
            "link[0].server: expected host:port",
        ),
        (
            format!(
                "user = \"a\"\nkey = \"{key}\"\nserver_fingerprint = \"{fp}\"\n[[link]]\nname = \"w\"\nserver = \"h:1\"\nweight = \"heavy\"\n"
            ),
            "weight",
        ),
        (
            format!(
                "user = \"a\"\nkey = \"{key}\"\nserver_fingerprint = \"{fp}\"\nsocks_listen = \"localhost\"\n[[link]]\nname = \"w\"\nserver = \"h:1\"\n"
            ),
            "socks_listen: expected ip:port",
        ),
        (
            format!(
                "user = \"a\"\nkey = \"{key}\"\nserver_fingerprint = \"{fp}\"\n[scheduler]\nname = \"nope\"\n[[link]]\nname = \"w\"\nserver = \"h:1\"\n"
            ),
            "scheduler.name",
        ),
    ];
    for (i, (text, want)) in client_cases.iter().enumerate() {
        let file = write(&dir, &format!("client{i}.toml"), text);
        let out = braid(&["client", "-c", &file]);
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{err}");
        assert!(err.contains(&file) && err.contains(want), "{err}");
    }
    let file = write(
        &dir,
        "server.toml",
        "listen = \"0.0.0.0:4433\"\n[[user]]\nname = \"a\"\nkey = \"short\"\n",
    );
    let out = braid(&["server", "-c", &file]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2));
    assert!(
        err.contains("user[0].key") && !err.contains("short"),
        "{err}"
    );
    let out = braid(&["client", "-c", "/nonexistent/braid.toml"]);
    assert_eq!(out.status.code(), Some(2));
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn print_fingerprint_is_stable() {
    let dir = state_dir("fingerprint");
    let text = format!(
        "listen = \"127.0.0.1:0\"\nstate_dir = \"{}\"\n[[user]]\nname = \"a\"\nkey = \"{}\"\n",
        dir.join("state").display(),
        "cd".repeat(32)
    );
    let file = write(&dir, "server.toml", &text);
    let a = braid(&["server", "-c", &file, "--print-fingerprint"]);
    let b = braid(&["server", "-c", &file, "--print-fingerprint"]);
    assert_eq!(a.status.code(), Some(0));
    let fp = String::from_utf8(a.stdout).unwrap();
    assert_eq!(fp.trim().len(), 95, "{fp}");
    assert_eq!(fp, String::from_utf8(b.stdout).unwrap());
    std::fs::remove_dir_all(&dir).unwrap();
}

/// `--check` validates the file, says what it sets up, and starts, opens and creates nothing
/// (no state directory, no certificate, no listener: the SOCKS5 port stays free).
#[test]
fn check_validates_without_starting_anything() {
    let dir = state_dir("check");
    let state = dir.join("state");
    let busy = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = busy.local_addr().unwrap().port();
    let server = write(
        &dir,
        "server.toml",
        &format!(
            "listen = \"127.0.0.1:{port}\"\nstate_dir = \"{}\"\nmetrics_listen = \"[::1]:9464\"\n\
             metrics_token = \"{}\"\n[[user]]\nname = \"a\"\nkey = \"{}\"\n\
             [[user]]\nname = \"b\"\nkey = \"{}\"\n[egress]\nallow_private = true\n\
             deny_networks = [\"203.0.113.0/24\"]\ndeny_ports = [25, \"6881-6889\"]\n",
            state.display(),
            "0a".repeat(16),
            "cd".repeat(32),
            "ef".repeat(32)
        ),
    );
    let out = braid(&["server", "-c", &server, "--check"]);
    assert_eq!(out.status.code(), Some(0));
    assert_eq!(
        String::from_utf8(out.stdout).unwrap(),
        format!(
            "{server}: a valid server configuration: listen 127.0.0.1:{port}, 2 users, scheduler \
             minrtt, egress private addresses allowed, 1 network denied, ports 25, 6881-6889 \
             denied, metrics http://[::1]:9464/metrics (bearer token)\n"
        )
    );
    let client = write(
        &dir,
        "client.toml",
        &format!(
            "user = \"a\"\nkey = \"{}\"\nserver_fingerprint = \"{}\"\nstate_dir = \"{}\"\n\
             socks_listen = \"127.0.0.1:{port}\"\n[tun]\nname = \"braidcheck0\"\n\
             [scheduler]\nname = \"edar\"\n[[link]]\nname = \"wifi\"\nserver = \"h:1\"\n",
            "cd".repeat(32),
            "ab".repeat(32),
            state.display()
        ),
    );
    let out = braid(&["client", "-c", &client, "--check"]);
    assert_eq!(out.status.code(), Some(0));
    assert_eq!(
        String::from_utf8(out.stdout).unwrap(),
        format!(
            "{client}: a valid client configuration: user a, 1 link (wifi), scheduler edar, \
             inbounds SOCKS5 127.0.0.1:{port}, TUN braidcheck0\n"
        )
    );
    assert!(!state.exists(), "--check created the state directory");
    let bad = write(&dir, "bad.toml", "user = \"a\"\n");
    let out = braid(&["client", "-c", &bad, "--check"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("bad.toml"));
    drop(busy);
    std::fs::remove_dir_all(&dir).unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn curl_through_every_proxy_inbound() {
    if Command::new("curl").arg("--version").output().is_err() {
        eprintln!("curl not installed; skipped");
        return;
    }
    let (_server, client) = pair("curl", 2).await;
    // A tiny HTTP server on loopback serving 4 MB.
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let web = listener.local_addr().unwrap();
    let body = pattern(4 << 20, 9);
    let expected = sha256(&body);
    tokio::spawn(async move {
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        while let Ok((mut s, _)) = listener.accept().await {
            let body = body.clone();
            tokio::spawn(async move {
                let mut head = vec![0u8; 4096];
                let _ = s.read(&mut head).await;
                let h = format!(
                    "HTTP/1.1 200 OK\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
                    body.len()
                );
                let _ = s.write_all(h.as_bytes()).await;
                let _ = s.write_all(&body).await;
                let _ = s.shutdown().await;
            });
        }
    });
    let socks = format!("127.0.0.1:{}", client.socks_addr.port());
    let http = format!("http://127.0.0.1:{}", client.http_addr.unwrap().port());
    let url = format!("http://localhost:{}/file", web.port());
    // SOCKS5 with the name resolved at the server; SOCKS4a likewise, SOCKS4 with the address
    // curl resolved; an HTTP CONNECT tunnel; a forwarded plain request.
    for args in [
        vec!["-sS", "--max-time", "30", "--socks5-hostname", &socks, &url],
        vec!["-sS", "--max-time", "30", "--socks4a", &socks, &url],
        vec!["-sS", "--max-time", "30", "--socks4", &socks, &url],
        vec![
            "-sS",
            "--max-time",
            "30",
            "--proxytunnel",
            "--proxy",
            &http,
            &url,
        ],
        vec!["-sS", "--max-time", "30", "--proxy", &http, &url],
    ] {
        let args: Vec<String> = args.into_iter().map(str::to_owned).collect();
        let out =
            tokio::task::spawn_blocking(move || Command::new("curl").args(&args).output().unwrap())
                .await
                .unwrap();
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        assert_eq!(sha256(&out.stdout), expected);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn braid_status_reads_the_control_socket() {
    let (_server, client) = pair("statuscli", 2).await;
    let socket = client.control_path.to_string_lossy().into_owned();
    let (json, table) = tokio::task::spawn_blocking(move || {
        (
            braid(&["status", "--socket", &socket, "--json"]),
            braid(&["status", "--socket", &socket]),
        )
    })
    .await
    .unwrap();
    assert_eq!(
        json.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&json.stderr)
    );
    let doc: serde_json::Value = serde_json::from_slice(&json.stdout).unwrap();
    assert_eq!(doc["role"], "client");
    assert_eq!(doc["sessions"][0]["paths"].as_array().unwrap().len(), 2);
    assert_eq!(doc["sessions"][0]["scheduler"], "minrtt");
    assert!(doc["sessions"][0].get("model_version").is_some());
    let text = String::from_utf8_lossy(&table.stdout);
    assert!(text.contains("link0") && text.contains("srtt"), "{text}");
    let missing =
        tokio::task::spawn_blocking(|| braid(&["status", "--socket", "/nonexistent.sock"]))
            .await
            .unwrap();
    assert_eq!(missing.status.code(), Some(1));
}

/// A running daemon process with its log (stderr) in a file.
struct Daemon {
    child: std::process::Child,
    log: std::path::PathBuf,
}

impl Daemon {
    fn start(args: &[&str], log: std::path::PathBuf) -> Daemon {
        Daemon::start_with(args, log, &[])
    }

    /// As [`Daemon::start`], with these variables in its environment.
    fn start_with(args: &[&str], log: std::path::PathBuf, env: &[(&str, &str)]) -> Daemon {
        let child = Command::new(env!("CARGO_BIN_EXE_braid"))
            .args(args)
            .envs(env.iter().copied())
            .env("RUST_LOG", "info")
            .stdout(std::process::Stdio::null())
            .stderr(std::fs::File::create(&log).unwrap())
            .spawn()
            .unwrap();
        Daemon { child, log }
    }

    /// Waits (at most 20 s) until the log has `count` lines containing `text`; the log.
    fn wait_for(&self, text: &str, count: usize) -> String {
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
        loop {
            let log = std::fs::read_to_string(&self.log).unwrap_or_default();
            if log.lines().filter(|l| l.contains(text)).count() >= count {
                return log;
            }
            assert!(
                std::time::Instant::now() < deadline,
                "no {text:?} in:\n{log}"
            );
            std::thread::sleep(std::time::Duration::from_millis(50));
        }
    }

    /// Writes `text` to `file`, sends SIGHUP and waits for the first log line containing
    /// `answer`; the log.
    fn reload(&self, file: &str, text: &str, answer: &str) -> String {
        std::fs::write(file, text).unwrap();
        self.signal(libc::SIGHUP);
        self.wait_for(answer, 1)
    }

    fn signal(&self, signal: libc::c_int) {
        let pid = libc::pid_t::try_from(self.child.id()).unwrap();
        // SAFETY: a signal to our own child, which has not been reaped.
        assert_eq!(unsafe { libc::kill(pid, signal) }, 0);
    }

    /// SIGTERM, then the exit code.
    fn stop(mut self) -> Option<i32> {
        self.signal(libc::SIGTERM);
        self.child.wait().unwrap().code()
    }

    /// The exit code, once it has exited (signalled already).
    fn stop_waiting(mut self) -> Option<i32> {
        self.child.wait().unwrap().code()
    }
}

/// A server's file: 127.0.0.1:0, user `a`, state in `state`, and `extra` before the user.
fn server_text(state: &str, extra: &str) -> String {
    format!(
        "listen = \"127.0.0.1:0\"\nstate_dir = \"{state}\"\n{extra}\n\
         [[user]]\nname = \"a\"\nkey = \"{}\"\n",
        "ab".repeat(32)
    )
}

/// A client's file for user `a` (state in `state`-client, SOCKS5 on 127.0.0.1:0), its one
/// link `w` to 127.0.0.1:9, where no server answers.
fn client_text(state: &str) -> String {
    format!(
        "user = \"a\"\nkey = \"{}\"\nserver_fingerprint = \"{}\"\n\
         state_dir = \"{state}-client\"\nsocks_listen = \"127.0.0.1:0\"\n\
         [[link]]\nname = \"w\"\nserver = \"127.0.0.1:9\"\n",
        "ab".repeat(32),
        "AB:".repeat(31) + "AB"
    )
}

/// SIGHUP makes `braid server` read its file again: a file that does not load changes nothing
/// (the error names the field), a good one is put in force and names what needs a restart; the
/// server goes on running throughout. `braid client` does the same with what it can reload (its
/// inbounds' users).
#[test]
fn sighup_reloads_the_server_and_the_client() {
    let dir = state_dir("sighup");
    let state = dir.join("state").to_string_lossy().into_owned();
    let server_file = |extra: &str| server_text(&state, extra);
    let file = write(&dir, "server.toml", &server_file(""));
    let server = Daemon::start(&["server", "-c", &file], dir.join("server.log"));
    server.wait_for("server running", 1);
    let bad = server_file("[limits]\nmax_sessions = 0");
    let log = server.reload(&file, &bad, "configuration not reloaded");
    assert!(log.contains("limits.max_sessions"), "{log}");
    let mut reloaded = server_file("server_name = \"other\"");
    reloaded.push_str(&format!(
        "[[user]]\nname = \"b\"\nkey = \"{}\"\n",
        "cd".repeat(32)
    ));
    let log = server.reload(&file, &reloaded, "take effect only at a restart");
    assert!(log.contains("changed=[\"user\"]"), "{log}");
    assert!(log.contains("server_name"), "{log}");
    assert_eq!(server.stop(), Some(0));

    let client_file = write(&dir, "client.toml", &client_text(&state));
    let client = Daemon::start(&["client", "-c", &client_file], dir.join("client.log"));
    client.wait_for("client running", 1);
    let text = std::fs::read_to_string(&client_file).unwrap();
    let bad = text.replace("user = \"a\"", "user = 7");
    let log = client.reload(&client_file, &bad, "configuration not reloaded");
    assert!(log.contains("user"), "{log}");
    let reloaded = text.replace("127.0.0.1:9", "127.0.0.1:10").replace(
        "socks_listen",
        "http_listen = \"127.0.0.1:0\"\nserver_name = \"elsewhere\"\nsocks_listen",
    ) + "[socks]\nusers = [{ name = \"bob\", password = \"s3cret\" }]\n";
    let log = client.reload(&client_file, &reloaded, "take effect only at a restart");
    assert!(
        log.contains("changed=[\"http_listen\", \"socks.users\", \"link\"]"),
        "{log}"
    );
    assert!(log.contains("settings=[\"server_name\"]"), "{log}");
    assert!(log.contains("reload: link changed; reconnecting"), "{log}");
    assert_eq!(client.stop(), Some(0));
    std::fs::remove_dir_all(&dir).unwrap();
}

/// Reads the notifications on `socket` until one satisfies `want` (at most 20 s); that one.
fn notification(socket: &std::os::unix::net::UnixDatagram, want: impl Fn(&str) -> bool) -> String {
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
    let mut buf = vec![0; 4096];
    let mut seen = Vec::new();
    while std::time::Instant::now() < deadline {
        let Ok(n) = socket.recv(&mut buf) else {
            continue;
        };
        let message = String::from_utf8(buf[..n].to_vec()).unwrap();
        if want(&message) {
            return message;
        }
        seen.push(message);
    }
    panic!("no such notification; got {seen:?}");
}

/// Started by systemd for a `Type=notify` unit (`NOTIFY_SOCKET`, `WATCHDOG_USEC`), the server
/// says READY=1 once it listens, with a status line naming where, feeds the watchdog every
/// third of its span, brackets each reload with RELOADING=1 (and the monotonic time) and
/// READY=1 (a file that does not load shows in the status line until a reload succeeds), and
/// says STOPPING=1 at SIGTERM. The client does the same through an abstract socket, once its
/// SOCKS5 inbound listens; a watchdog meant for another process is not fed.
#[test]
fn the_daemons_tell_systemd_when_they_are_ready_reload_and_stop() {
    use std::os::unix::net::UnixDatagram;
    let dir = state_dir("notify");
    std::fs::create_dir_all(&dir).unwrap();
    let state = dir.join("state").to_string_lossy().into_owned();
    let server_file = |extra: &str| server_text(&state, extra);
    let file = write(&dir, "server.toml", &server_file(""));
    let path = dir.join("notify.sock");
    let socket = UnixDatagram::bind(&path).unwrap();
    socket
        .set_read_timeout(Some(std::time::Duration::from_millis(200)))
        .unwrap();
    let server = Daemon::start_with(
        &["server", "-c", &file],
        dir.join("server.log"),
        &[
            ("NOTIFY_SOCKET", path.to_str().unwrap()),
            ("WATCHDOG_USEC", "300000"),
        ],
    );
    let ready = notification(&socket, |m| m.starts_with("READY=1\n"));
    let status = ready.strip_prefix("READY=1\nSTATUS=listening on ").unwrap();
    assert!(
        status.ends_with("; 0 sessions, 0 paths live; 0 joins accepted, 0 refused"),
        "{ready}"
    );
    // Ready means bound: the address is taken.
    let addr: std::net::SocketAddr = status.split(';').next().unwrap().parse().unwrap();
    assert!(
        std::net::UdpSocket::bind(addr).is_err(),
        "{addr} is not bound"
    );
    let started = std::time::Instant::now();
    for _ in 0..3 {
        notification(&socket, |m| m.starts_with("WATCHDOG=1"));
    }
    assert!(started.elapsed() < std::time::Duration::from_secs(2));
    std::fs::write(&file, server_file("[limits]\nmax_sessions = 0")).unwrap();
    server.signal(libc::SIGHUP);
    let reloading = notification(&socket, |m| m.starts_with("RELOADING=1"));
    let usec: u64 = reloading
        .strip_prefix("RELOADING=1\nMONOTONIC_USEC=")
        .unwrap()
        .parse()
        .unwrap();
    assert!(usec > 0, "{reloading}");
    let failed = notification(&socket, |m| m.starts_with("READY=1"));
    assert!(
        failed.contains("; last reload failed: ") && failed.contains("limits.max_sessions"),
        "{failed}"
    );
    let fed = notification(&socket, |m| m.starts_with("WATCHDOG=1"));
    // The status line is sent again only when it changes, and it still names the failure.
    assert!(
        !fed.contains("STATUS=") || fed.contains("last reload failed"),
        "{fed}"
    );
    std::fs::write(&file, server_file("")).unwrap();
    server.signal(libc::SIGHUP);
    notification(&socket, |m| m.starts_with("RELOADING=1"));
    let done = notification(&socket, |m| m.starts_with("READY=1"));
    assert!(!done.contains("failed"), "{done}");
    server.signal(libc::SIGTERM);
    notification(&socket, |m| m == "STOPPING=1");
    assert_eq!(server.stop_waiting(), Some(0));

    let name = format!("braid-test-{}-notify", std::process::id());
    let abstract_addr = {
        use std::os::linux::net::SocketAddrExt as _;
        std::os::unix::net::SocketAddr::from_abstract_name(name.as_bytes()).unwrap()
    };
    let socket = UnixDatagram::bind_addr(&abstract_addr).unwrap();
    socket
        .set_read_timeout(Some(std::time::Duration::from_millis(200)))
        .unwrap();
    let client_file = write(&dir, "client.toml", &client_text(&state));
    let client = Daemon::start_with(
        &["client", "-c", &client_file],
        dir.join("client.log"),
        &[
            ("NOTIFY_SOCKET", &format!("@{name}")),
            ("WATCHDOG_USEC", "300000"),
            ("WATCHDOG_PID", "1"),
        ],
    );
    let ready = notification(&socket, |m| m.starts_with("READY=1\n"));
    assert!(
        ready.starts_with("READY=1\nSTATUS=0 of 1 link joined; w "),
        "{ready}"
    );
    let socks = ready.rsplit("socks5 ").next().unwrap();
    std::net::TcpStream::connect(socks).expect("the SOCKS5 inbound listens at READY=1");
    // Another process's watchdog: nothing in a second but the status line, at most.
    let until = std::time::Instant::now() + std::time::Duration::from_secs(1);
    let mut buf = [0; 4096];
    while std::time::Instant::now() < until {
        if let Ok(n) = socket.recv(&mut buf) {
            assert!(!buf[..n].starts_with(b"WATCHDOG"), "fed another's watchdog");
        }
    }
    client.signal(libc::SIGTERM);
    notification(&socket, |m| m == "STOPPING=1");
    assert_eq!(client.stop_waiting(), Some(0));
    std::fs::remove_dir_all(&dir).unwrap();
}

/// With standard error on the journal's stream (`JOURNAL_STREAM` naming its device and inode),
/// each line leads with its syslog priority, so that journald files it under that priority, and
/// has no time stamp; every line of a message of several keeps it. Without, lines are as
/// before.
#[test]
fn log_lines_carry_their_priority_for_the_journal() {
    use std::os::unix::fs::MetadataExt as _;
    let dir = state_dir("journal");
    std::fs::create_dir_all(&dir).unwrap();
    let state = dir.join("state").to_string_lossy().into_owned();
    let file = write(&dir, "server.toml", &server_text(&state, ""));
    let log = dir.join("server.log");
    let meta = std::fs::File::create(&log).unwrap().metadata().unwrap();
    let stream = format!("{}:{}", meta.dev(), meta.ino());
    let server = Daemon::start_with(
        &["server", "-c", &file],
        log.clone(),
        &[("JOURNAL_STREAM", &stream)],
    );
    server.wait_for("server running", 1);
    // An unknown key: the parser's message runs over several lines.
    let text = server.reload(
        &file,
        &server_text(&state, "bogus = 1"),
        "configuration not reloaded",
    );
    assert!(
        text.lines()
            .any(|l| l.starts_with("<6> INFO") && l.contains("server running")),
        "{text}"
    );
    let error: Vec<&str> = text
        .lines()
        .skip_while(|l| !l.contains("configuration not reloaded"))
        .take_while(|l| !l.contains("INFO"))
        .collect();
    assert!(error.len() > 1, "{text}");
    assert!(error.iter().all(|l| l.starts_with("<3>")), "{text}");
    assert!(text.lines().all(|l| l.starts_with('<')), "{text}");
    assert_eq!(server.stop(), Some(0));
    // Another stream: plain lines, time first.
    std::fs::write(&file, server_text(&state, "")).unwrap();
    let server = Daemon::start_with(
        &["server", "-c", &file],
        dir.join("plain.log"),
        &[("JOURNAL_STREAM", &stream)],
    );
    let text = server.wait_for("server running", 1);
    assert!(text.starts_with("20"), "{text}");
    assert_eq!(server.stop(), Some(0));
    std::fs::remove_dir_all(&dir).unwrap();
}

/// `braid emu | head -2`: once the reader of its standard output has gone, the emulator stops
/// with code 0 at its next counters, where `println!` would panic on the broken pipe.
#[test]
fn emu_stops_quietly_when_its_output_is_closed() {
    use std::io::BufRead as _;
    let dir = state_dir("emu-pipe");
    let file = write(
        &dir,
        "emu.toml",
        "[[path]]\nname = \"a\"\nlisten = \"127.0.0.1:0\"\nforward = \"127.0.0.1:9\"\nrate_mbps = 10.0\n",
    );
    // Port 0 is for in-process use; a free port for the real command.
    let port = std::net::UdpSocket::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let text = std::fs::read_to_string(&file)
        .unwrap()
        .replace("127.0.0.1:0", &format!("127.0.0.1:{port}"));
    std::fs::write(&file, text).unwrap();
    let mut child = Command::new(env!("CARGO_BIN_EXE_braid"))
        .args(["emu", "-c", &file, "--stats-interval", "0.1"])
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let mut lines = std::io::BufReader::new(child.stdout.take().unwrap()).lines();
    assert!(
        lines
            .next()
            .unwrap()
            .unwrap()
            .starts_with("braid emu: path a")
    );
    assert!(lines.next().unwrap().unwrap().contains("0 client(s)"));
    drop(lines);
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    let status = loop {
        if let Some(status) = child.try_wait().unwrap() {
            break status;
        }
        if std::time::Instant::now() > deadline {
            let _ = child.kill();
            panic!("braid emu still runs 10 s after its output closed");
        }
        std::thread::sleep(std::time::Duration::from_millis(50));
    };
    let mut stderr = String::new();
    std::io::Read::read_to_string(&mut child.stderr.take().unwrap(), &mut stderr).unwrap();
    assert!(status.success(), "{status:?}: {stderr}");
    assert!(!stderr.contains("panicked"), "{stderr}");
    let _ = std::fs::remove_dir_all(&dir);
}
