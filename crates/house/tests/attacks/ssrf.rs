//! Issue 10 §1: a stranger cannot turn the house's fetches inward. Against `712cee6` an
//! unauthenticated `POST /inbound` naming the attacker's domain made the house fetch whatever
//! that domain's card or DNS record named (loopback, the private network, the cloud's metadata
//! address) before anything was verified, and the error it answered named what answered where.
//! Each test performs the attack through public routes and checks that no request reached the
//! inner address (the in-memory network logs every request that leaves the house).

use nyx5_house::Registration;
use nyx5_house::http::Response;
use nyx5_proto::crypto::SigningKey;
use nyx5_proto::relay::RelayHeader;
use nyx5_proto::{Address, ErrorKind};

use crate::common::{envelope, error, reason};
use crate::kit::*;
use crate::resolver_state::{domain_card, serve, serve_dns};

/// What an attacker sends: an envelope from `mallory@<domain>` to bob at b.test, relayed under
/// `<domain>` with a header its own key signed.
fn relay_from(w: &World, b: &TestHouse, domain: &str, key: &SigningKey) -> Response {
    let mallory = Agent::new(&format!("mallory@{domain}"), 66);
    let bob = Address::parse("bob@b.test").unwrap();
    let env = envelope(&mallory, &format!("x{}", w.clock.now().millis()), &[&bob], |_| {});
    let header = RelayHeader::sign(domain, &env, "b.test", key).to_header();
    call_raw(b, "POST", "/inbound", &[("x-nyx5-relay", &header)], env.canonical())
}

fn house_b(w: &World) -> std::rc::Rc<TestHouse> {
    let b = w.house("b.test", Registration::Admin);
    json(&Agent::new("bob@b.test", 20).register_admin(&b), 201);
    b
}

/// Inner targets named the ways an attacker would write them, and the host the in-memory network
/// would log a request to each under.
const INWARD: [(&str, &str); 7] = [
    ("http://10.0.0.7", "10.0.0.7"),
    ("http://127.0.0.1:6379", "127.0.0.1:6379"),
    ("http://2130706433", "2130706433"),
    ("http://0x7f.1:8080", "0x7f.1:8080"),
    ("http://[::1]:8080", "[::1]:8080"),
    ("http://169.254.169.254", "169.254.169.254"),
    ("http://metadata.google.internal", "metadata.google.internal"),
];

#[test]
fn a_card_whose_estafeta_points_inward_makes_the_house_fetch_nothing_there() {
    for (estafeta, host) in INWARD {
        let w = World::new();
        let b = house_b(&w);
        let key = SigningKey::from_seed([90; 32]);
        serve(&w, "evil.test", &domain_card("evil.test", estafeta, &key, vec![], w.clock.now()), &key);
        let resp = relay_from(&w, &b, "evil.test", &key);
        assert_eq!(resp.status, 403, "{estafeta}: {}", reason(&resp));
        assert_eq!(error(&resp), "url_refused", "{estafeta}: {}", reason(&resp));
        assert_eq!(w.sent_to("://evil.test/.well-known/"), 1, "{estafeta}: the card itself was fetched");
        assert_eq!(w.sent_to(&format!("://{host}/")), 0, "{estafeta}: a request went inward");
    }
}

#[test]
fn a_dns_record_naming_the_metadata_address_is_not_followed() {
    let w = World::new();
    let mut config = w.config("b.test", Registration::Admin);
    config.doh_url = Some("https://dns.test/resolve".into());
    let b = w.start(config);
    json(&Agent::new("bob@b.test", 20).register_admin(&b), 201);
    serve_dns(&w, Some("v=nyx51; url=http://169.254.169.254/latest".into()));
    let resp = relay_from(&w, &b, "evil.test", &SigningKey::from_seed([90; 32]));
    assert_eq!(resp.status, 403, "{}", reason(&resp));
    assert_eq!(w.sent_to("://dns.test/"), 1, "the DNS lookup itself happened");
    assert_eq!(w.sent_to("169.254.169.254"), 0);
}

#[test]
fn localhost_and_addresses_are_not_house_domains_unless_the_hosts_file_names_them() {
    for domain in ["localhost", "127.0.0.1", "2130706433", "printer.local", "router"] {
        let w = World::new();
        let b = house_b(&w);
        let resp = relay_from(&w, &b, domain, &SigningKey::from_seed([90; 32]));
        assert_eq!(resp.status, 403, "{domain}: {}", reason(&resp));
        assert_eq!(error(&resp), "not_public_domain", "{domain}: {}", reason(&resp));
        assert_eq!(w.sent_to(domain), 0, "{domain}: it was fetched");
    }
}

#[test]
fn mail_to_a_house_whose_estafeta_is_private_bounces_at_once_instead_of_probing_for_days() {
    let w = World::new();
    let a = w.house("a.test", Registration::Admin);
    let alice = Agent::new("alice@a.test", 10);
    json(&alice.register_admin(&a), 201);
    let key = SigningKey::from_seed([90; 32]);
    serve(&w, "evil.test", &domain_card("evil.test", "http://10.0.0.7:22", &key, vec![], w.clock.now()), &key);
    let victim = Address::parse("victim@evil.test").unwrap();
    json(&alice.send(&a, &alice.draft("s1", &[&victim], "hi").sign(&alice.sig).unwrap()), 202);
    let report = w.tick_all();
    assert_eq!((report.bounced, report.retried), (1, 0));
    assert_eq!(w.sent_to("10.0.0.7"), 0);
    let notice = mailbox(&a, &alice).into_iter().find(|e| e.from().local() == "postmaster").expect("a bounce");
    assert!(notice.canonical_str().contains("outbound policy"));
}

#[test]
fn an_error_answered_to_a_stranger_does_not_say_what_answered_where() {
    let w = World::new();
    let b = house_b(&w);
    let key = SigningKey::from_seed([90; 32]);
    // A public name on a port of the attacker's choosing, where nothing answers.
    serve(&w, "evil.test", &domain_card("evil.test", "https://scan.example:2222", &key, vec![], w.clock.now()), &key);
    let resp = relay_from(&w, &b, "evil.test", &key);
    assert_eq!(resp.status, ErrorKind::Unavailable.code(), "{}", reason(&resp));
    assert_eq!(w.sent_to("://scan.example:2222/"), 1, "the request went out");
    assert_eq!(error(&resp), "peer_unavailable", "{}", reason(&resp));
    let why = reason(&resp);
    assert!(!why.contains("scan.example") && !why.contains("2222") && !why.contains("route"), "{why}");
}

#[test]
fn a_webhook_pointing_inward_is_refused_when_it_is_set() {
    let w = World::new();
    let b = w.house("b.test", Registration::Admin);
    let bob = Agent::new("bob@b.test", 20);
    for (url, _) in INWARD {
        let body = bob.registration(&b, &[("webhook", format!("{url}/hook").as_str().into())]);
        let resp = call(&b, "POST", "/agents", &[("authorization", "Bearer admin-b.test")], &body);
        assert_eq!(resp.status, 400, "{url}: {}", reason(&resp));
        assert_eq!(error(&resp), "bad_webhook", "{url}: {}", reason(&resp));
    }
    assert_eq!(call_raw(&b, "GET", "/agents/bob", &[], vec![]).status, 404, "nothing was registered");
    // A public https webhook is taken.
    let body = bob.registration(&b, &[("webhook", "https://hooks.example/bob".into())]);
    json(&call(&b, "POST", "/agents", &[("authorization", "Bearer admin-b.test")], &body), 201);
}
