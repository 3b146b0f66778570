//! `route/way/<table>`: the routing decision the client makes for every TCP flow when it opens
//! and, through a UDP router, for every datagram (`RouteTable::way`), over tables of growing
//! size, each timed for a destination that no route matches (every table and entry is read):
//! `none` (no `[[route]]`), `small` (three tables: a LAN, two names, a port), `large` (64
//! tables of 256 networks each, by address) and `large_names` (64 tables of 256 domains each,
//! by name). Also `route/way/learned`: the large table of domains for an address with a name
//! learned from DNS (what the TUN inbound's flows meet).
#![allow(missing_docs, clippy::unwrap_used, clippy::expect_used)]

use std::hint::black_box;

use braid_proxy::config::{DomainPattern, PortRange, Route, RouteAction};
use braid_proxy::inbound::route::Routes;
use braid_proxy::session::Target;
use criterion::{Criterion, criterion_group, criterion_main};

fn route(action: RouteAction) -> Route {
    Route::every(action)
}

fn domain(name: String) -> DomainPattern {
    DomainPattern {
        name,
        below_only: false,
    }
}

fn small() -> Vec<Route> {
    let mut lan = route(RouteAction::Direct);
    lan.networks = vec![
        "192.168.0.0/16".parse().unwrap(),
        "fd00::/8".parse().unwrap(),
    ];
    let mut names = route(RouteAction::Direct);
    names.domains = vec![domain("lan".into()), domain("video.example".into())];
    let mut mail = route(RouteAction::Block);
    mail.ports = vec![PortRange {
        first: 25,
        last: 25,
    }];
    vec![lan, names, mail]
}

fn large_networks() -> Vec<Route> {
    (0..64u32)
        .map(|t| {
            let mut r = route(RouteAction::Direct);
            r.networks = (0..256u32)
                .map(|n| format!("10.{t}.{n}.0/24").parse().unwrap())
                .collect();
            r
        })
        .collect()
}

fn large_domains() -> Vec<Route> {
    (0..64)
        .map(|t| {
            let mut r = route(RouteAction::Direct);
            r.domains = (0..256)
                .map(|n| domain(format!("site{n}.zone{t}.example")))
                .collect();
            r
        })
        .collect()
}

fn bench(c: &mut Criterion) {
    let address = Target::Addr("203.0.113.9:443".parse().unwrap());
    let name = Target::Domain {
        name: "www.elsewhere.example.org".into(),
        port: 443,
    };
    for (label, routes, target, learned) in [
        ("none", Vec::new(), &address, None),
        ("small", small(), &address, None),
        ("large", large_networks(), &address, None),
        ("large_names", large_domains(), &name, None),
        (
            "learned",
            large_domains(),
            &address,
            Some("cdn.elsewhere.example.org"),
        ),
    ] {
        let table = Routes::new(routes).current();
        c.bench_function(&format!("route/way/{label}"), |b| {
            b.iter(|| black_box(table.way(black_box(target), learned, true)));
        });
    }
}

criterion_group!(benches, bench);
criterion_main!(benches);
