//! `config/local/` (emu.toml, server.toml, client.toml): the three files parse, agree with each
//! other (ports, key, certificate pin) and describe the links the issue asks for; and the
//! system they describe carries a curl download over the emulated links (with ephemeral ports
//! instead of the files' fixed ones, so the test never collides with a running set-up).
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod emu_common;

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use braid_proxy::config::{ClientConfig, ServerConfig, ServerTrust};
use braid_proxy::daemon::{start_client, start_server};
use braid_proxy::tls::ServerIdentity;
use braid_testbed::Capacity;
use braid_testbed::emu::{EmuConfig, Emulator};
use emu_common::*;

fn local(file: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../../config/local")
        .join(file)
}

fn load() -> (EmuConfig, ServerConfig, ClientConfig) {
    (
        EmuConfig::load(&local("emu.toml")).unwrap(),
        ServerConfig::load(&local("server.toml")).unwrap(),
        ClientConfig::load(&local("client.toml")).unwrap(),
    )
}

#[test]
fn the_three_files_parse_and_agree() {
    let (emu, server, client) = load();
    // Two links: 30 Mbit/s with RTT 20 ms, 20 Mbit/s with RTT 40 ms (one-way 10 and 20 ms,
    // the same both ways).
    let expected = [("wifi", 30.0, 10.0), ("lte", 20.0, 20.0)];
    assert_eq!(emu.paths.len(), 2);
    for (path, (name, rate, one_way)) in emu.paths.iter().zip(expected) {
        assert_eq!(path.link.name, name);
        for dir in [&path.link.forward, &path.link.reverse] {
            assert!(matches!(dir.capacity, Capacity::Rate { mbps } if mbps == rate));
            assert_eq!(dir.delay_ms, one_way);
            assert_eq!(dir.loss, 0.0);
        }
        assert_eq!(
            [path.forward],
            *server.listen,
            "the emulator forwards to the server"
        );
        assert!(path.listen.ip().is_loopback());
    }
    let links: Vec<String> = client.links.iter().flat_map(|l| l.server.clone()).collect();
    let listens: Vec<String> = emu.paths.iter().map(|p| p.listen.to_string()).collect();
    assert_eq!(
        links, listens,
        "the client's links go through the emulator, in order"
    );
    assert_eq!(client.socks_listen, "127.0.0.1:1080".parse().unwrap());
    assert!(
        server.egress.allow_loopback,
        "egress to 127.0.0.1 is allowed"
    );
    assert!(server.listen.iter().all(|a| a.ip().is_loopback()));
    assert!(
        server
            .users
            .iter()
            .any(|u| u.name == client.user && u.key == client.key),
        "the client's user and key are the server's"
    );
    let state = local("server-state");
    let identity = ServerIdentity::load_or_generate(&state, &server.server_name).unwrap();
    let pin = braid_proxy::config::parse_fingerprint(&identity.fingerprint()).unwrap();
    assert!(
        matches!(client.trust, ServerTrust::Fingerprint(p) if p == pin),
        "client.toml pins the certificate in config/local/server-state"
    );
    assert!(
        state.join("server-cert.der").exists() && state.join("server-key.der").exists(),
        "the committed local test certificate was used, not a fresh one"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_local_set_up_carries_curl_through_socks5() {
    require_curl();
    let (mut emu_config, mut server_config, mut client_config) = load();
    let dir = temp_dir("local");
    let identity =
        ServerIdentity::load_or_generate(&local("server-state"), &server_config.server_name)
            .unwrap();
    server_config.listen = vec!["127.0.0.1:0".parse().unwrap()];
    server_config.state_dir = dir.join("server");
    let server = start_server(server_config, identity).await.unwrap();
    for path in &mut emu_config.paths {
        path.listen = "127.0.0.1:0".parse().unwrap();
        path.forward = server.addr;
    }
    let emu = Emulator::start(&emu_config).await.unwrap();
    client_config.socks_listen = "127.0.0.1:0".parse().unwrap();
    client_config.state_dir = dir.join("client");
    for (link, addr) in client_config.links.iter_mut().zip(emu.listen_addrs()) {
        link.server = vec![addr.to_string()];
    }
    let client = start_client(client_config).await.unwrap();
    assert!(client.wait_for_paths(2, Duration::from_secs(15)).await);
    let blob = Arc::new(pattern(5 * MB, 9));
    let http = http_server(blob.clone()).await;
    let (digest, took) = curl_download(client.socks_addr, http, &dir, 30).await;
    assert_eq!(digest, sha256_hex(&blob));
    println!(
        "config/local: 5 MB in {:.2} s ({:.1} Mbit/s)",
        took.as_secs_f64(),
        mbps(5 * MB, took)
    );
    let _ = std::fs::remove_dir_all(&dir);
}
