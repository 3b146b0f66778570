//! Issue #7, "with `torch`, `braid client`/`server` learn online and `braid status` shows the
//! model version advancing; without it, they run the shipped weights": a server and a client,
//! both on a learned scheduler as `[scheduler]` configures it in a daemon
//! (`braid_proxy::train::daemon_scheduler_config`), with two emulated links whose one-way delay
//! steps every second; downloads through the SOCKS5 inbound while the control endpoint (what
//! `braid status` reads) is polled for the sessions' `model_version`.
//!
//! - feature `torch`: FALCON's version must advance (its learner publishes after a detected
//!   change and K = 16 fine-tuning steps), and EdAR's (Alg. 2 publishes after every training
//!   batch);
//! - without it: both report version 0 (the shipped weights) after the same transfer, and their
//!   daemon configuration carries the shipped weights and no learner.
//!
//! Run: `source scripts/setup-torch.sh && cargo test -p braid-proxy --features torch --test
//! learn_online`, and `cargo test -p braid-proxy --test learn_online` for the shipped-weights
//! half.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod daemon_common;
mod emu_common;

use std::net::SocketAddr;
use std::path::Path;
use std::time::Duration;
#[cfg(feature = "torch")]
use std::time::Instant;

use braid_proxy::control;
use braid_proxy::daemon::{ServerHandle, start_client, start_server};
use braid_proxy::tls::ServerIdentity;
use braid_proxy::train::daemon_scheduler_config;
use braid_sched_core::SchedulerKind;
use braid_testbed::emu::{EmuHandle, Emulator};

/// Wi-Fi-like link whose one-way delay switches 10 ↔ 40 ms every second (RTT 20 ↔ 80 ms).
const WIFI_STEPPING: &str = "rate_mbps = 30.0\ndelay_ms = 10.0\nqueue_packets = 300\n\
     changes = [{ at_s = 0.0, delay_ms = 10.0 }, { at_s = 1.0, delay_ms = 40.0 }]\n\
     changes_period_s = 2.0";
/// Bytes per download (about 3 s on the two links' 50 Mbit/s).
const DOWNLOAD: u32 = 16_000_000;

/// Server, emulator and client, both daemons on `kind` as configured in a daemon.
struct Bed {
    server: ServerHandle,
    client: braid_proxy::daemon::ClientHandle,
    _emu: EmuHandle,
    dir: std::path::PathBuf,
}

impl Drop for Bed {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

async fn bed(name: &str, kind: SchedulerKind) -> Bed {
    let dir = emu_common::temp_dir(name);
    let mut server_config = emu_common::server_config(&dir);
    server_config.scheduler = daemon_scheduler_config(kind);
    let server = start_server(server_config, ServerIdentity::generate("braid").unwrap())
        .await
        .unwrap();
    let emu = Emulator::start(&emu_common::emu_config(
        server.addr,
        &[WIFI_STEPPING, emu_common::LTE],
    ))
    .await
    .unwrap();
    let mut client_config =
        emu_common::client_config(&dir, &server.fingerprint, &emu.listen_addrs());
    client_config.scheduler = daemon_scheduler_config(kind);
    let client = start_client(client_config).await.unwrap();
    assert!(
        client.wait_for_paths(2, Duration::from_secs(15)).await,
        "links did not join through the emulator"
    );
    Bed {
        server,
        client,
        _emu: emu,
        dir,
    }
}

/// `(scheduler, model_version)` of every session, as `braid status` reads them from `control`.
async fn versions(control: &Path) -> Vec<(String, Option<u64>)> {
    control::query(control)
        .await
        .unwrap()
        .sessions
        .into_iter()
        .map(|s| (s.scheduler, s.model_version))
        .collect()
}

/// The server session's model version (the server sends the downloads).
#[cfg(feature = "torch")]
async fn server_version(bed: &Bed) -> u64 {
    let sessions = versions(&bed.server.control_path).await;
    assert_eq!(sessions.len(), 1, "{sessions:?}");
    sessions[0]
        .1
        .expect("a learned scheduler reports its model version")
}

/// One download through the proxy, bytes checked.
async fn download(bed: &Bed, target: SocketAddr) {
    let got = daemon_common::download(bed.client.socks_addr, target, DOWNLOAD).await;
    assert_eq!(got.len(), DOWNLOAD as usize);
    assert!(
        got == daemon_common::pattern(DOWNLOAD as usize, 7),
        "downloaded bytes differ"
    );
}

/// Downloads until the server session's model version is above where it started, within
/// `limit`; returns (start, end, downloads).
#[cfg(feature = "torch")]
async fn download_until_version_advances(bed: &Bed, limit: Duration) -> (u64, u64, u32) {
    let target = daemon_common::test_server().await;
    let start = server_version(bed).await;
    let deadline = Instant::now() + limit;
    let mut downloads = 0;
    loop {
        download(bed, target).await;
        downloads += 1;
        let now = server_version(bed).await;
        if now > start || Instant::now() > deadline {
            return (start, now, downloads);
        }
    }
}

/// The torch tests one at a time: each stops the process's learners when it ends (they must be
/// stopped before the process exits, `braid_proxy::train::stop_learners`), which would stop
/// the other's too.
#[cfg(feature = "torch")]
static ONE_AT_A_TIME: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

#[cfg(feature = "torch")]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn falcon_model_version_advances_while_the_daemons_learn() {
    let _alone = ONE_AT_A_TIME.lock().await;
    let bed = bed("learn-falcon", SchedulerKind::Falcon).await;
    let (start, end, downloads) =
        download_until_version_advances(&bed, Duration::from_secs(60)).await;
    println!("falcon: server model_version {start} -> {end} after {downloads} download(s)");
    assert!(
        end > start,
        "falcon's model version stayed at {start} over {downloads} downloads with the link's RTT stepping every second"
    );
    let client = versions(&bed.client.control_path).await;
    assert!(
        client
            .iter()
            .all(|(name, v)| name == "falcon" && v.is_some()),
        "{client:?}"
    );
    drop(bed);
    braid_proxy::train::stop_learners();
}

#[cfg(feature = "torch")]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn edar_model_version_advances_while_the_daemons_learn() {
    let _alone = ONE_AT_A_TIME.lock().await;
    let bed = bed("learn-edar", SchedulerKind::Edar).await;
    let (start, end, downloads) =
        download_until_version_advances(&bed, Duration::from_secs(60)).await;
    println!("edar: server model_version {start} -> {end} after {downloads} download(s)");
    assert!(
        end > start,
        "edar's model version stayed at {start} over {downloads} downloads"
    );
    drop(bed);
    braid_proxy::train::stop_learners();
}

/// Without `torch` the daemons' configuration holds the shipped weights and no learner, and the
/// model version stays 0 through a transfer with link changes.
#[cfg(not(feature = "torch"))]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_torch_the_daemons_run_the_shipped_weights() {
    use braid_sched_core::SchedulerConfig;
    use braid_sched_core::sched::falcon::FalconWeights;

    match daemon_scheduler_config(SchedulerKind::Falcon) {
        SchedulerConfig::Falcon(c) => {
            let shipped = braid_proxy::train::falcon::shipped_weights().expect("shipped falcon");
            let weights = c.weights.expect("falcon's daemon config carries weights");
            assert!(
                *weights == **shipped,
                "falcon's daemon weights are not the shipped ones"
            );
            assert_ne!(*weights, FalconWeights::minrtt());
            assert!(c.learner.is_none(), "a falcon learner without torch");
        }
        _ => panic!("falcon's daemon config is not falcon's"),
    }
    match daemon_scheduler_config(SchedulerKind::Edar) {
        SchedulerConfig::Edar(c) => {
            let shipped = braid_proxy::train::edar::shipped_network().expect("shipped edar");
            let weights = c.weights.expect("edar's daemon config carries weights");
            assert!(
                *weights.weights() == *shipped,
                "edar's daemon weights are not the shipped ones"
            );
            assert!(c.experience.is_none(), "an edar learner without torch");
        }
        _ => panic!("edar's daemon config is not edar's"),
    }
    for (name, kind) in [
        ("shipped-falcon", SchedulerKind::Falcon),
        ("shipped-edar", SchedulerKind::Edar),
    ] {
        let bed = bed(name, kind).await;
        let target = daemon_common::test_server().await;
        download(&bed, target).await;
        for control in [&bed.server.control_path, &bed.client.control_path] {
            let sessions = versions(control).await;
            assert!(!sessions.is_empty());
            for (scheduler, version) in sessions {
                assert_eq!(scheduler, kind.name());
                assert_eq!(
                    version,
                    Some(0),
                    "{scheduler} moved off the shipped weights"
                );
            }
        }
    }
}
