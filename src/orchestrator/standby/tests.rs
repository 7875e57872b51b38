//! Unit tests of the seat, the lease, the hold and the fence.

use super::lease::*;
use super::*;
use std::time::SystemTime;

#[test]
fn a_lease_lapses_after_its_time_and_a_hold_covers_only_older_messages() {
    let mut lease = Lease {
        valid_for: Duration::from_millis(200),
        ..Lease::default()
    };
    assert!(!lease.valid(), "never written: no lease");
    lease.renew();
    assert!(lease.valid() && lease.lapsed_for().is_none());
    let before = SystemTime::now() - Duration::from_secs(1);
    assert!(!lease.holds(before), "no hold yet");
    lease.hold_now(Duration::from_secs(60));
    assert!(
        lease.holds(before),
        "a message there at the take-over waits"
    );
    let later = SystemTime::now() + Duration::from_secs(1);
    assert!(!lease.holds(later), "a message that arrives later does not");
    lease.hold_now(Duration::ZERO);
    assert!(lease.holds(before), "a zero hold changes nothing");
    std::thread::sleep(Duration::from_millis(250));
    assert!(!lease.valid() && lease.lapsed_for().is_some(), "lapsed");
    let mut short = Lease::default();
    short.hold_now(Duration::from_millis(1));
    std::thread::sleep(Duration::from_millis(5));
    assert!(!short.holds(before), "an ended hold holds nothing");
}

fn other_lock(store: &Store, host: &str, epoch: u64, heartbeat: crate::model::Timestamp) {
    let info = LockInfo {
        host: host.into(),
        pid: 4242,
        started: heartbeat,
        heartbeat,
        boot_id: None,
        pid_start: None,
        epoch,
    };
    std::fs::write(store.lock_path(), serde_json::to_vec(&info).unwrap()).unwrap();
}

fn timing() -> LockTiming {
    LockTiming {
        heartbeat: Duration::from_millis(100),
        stale_after: Duration::from_millis(600),
    }
}

/// A lock that arrives late through a sync engine looks stale by the time written in it;
/// a standby takes it over only after watching it unchanged for the stale time itself,
/// and a newer copy arriving meanwhile starts the watch again.
#[test]
fn a_standby_takes_over_only_a_lock_it_watched_unchanged_for_the_stale_time() {
    let d = tempfile::tempdir().unwrap();
    let (store, _) = Store::init(&d.path().join("s")).unwrap();
    let old = crate::model::Timestamp::now();
    let long_ago = crate::model::Timestamp(old.0 - chrono::Duration::seconds(3600));
    other_lock(&store, "elsewhere", 7, long_ago);
    let mut seat = Seat::new(store.lock_path(), timing(), Duration::ZERO, true)
        .with_hold(Duration::from_secs(60));
    let started = Instant::now();
    seat.poll(&store).unwrap();
    assert!(
        matches!(seat.role(), Role::Standby(w) if w.contains("elsewhere")),
        "{:?}",
        seat.role()
    );
    // The holder's next write arrives (still old by its own clock): the watch starts over.
    std::thread::sleep(Duration::from_millis(400));
    other_lock(
        &store,
        "elsewhere",
        7,
        crate::model::Timestamp(long_ago.0 + chrono::Duration::seconds(2)),
    );
    let rewritten = Instant::now();
    poll_until_answering(&mut seat, &store);
    assert!(
        rewritten.elapsed() >= timing().stale_after,
        "took over {:?} after the lock last changed, before watching it for the stale time ({:?} since the first look)",
        rewritten.elapsed(),
        started.elapsed()
    );
    assert_eq!(seat.lock_info().unwrap().epoch, 8);
}

/// After a take-over every message waits, new ones too, until the old holder's heartbeat
/// says it stood down; then only the messages already there wait (for its answers).
#[test]
fn after_a_take_over_every_message_waits_until_the_old_holder_is_seen_standing_down() {
    let d = tempfile::tempdir().unwrap();
    let (store, _) = Store::init(&d.path().join("s")).unwrap();
    let beat =
        crate::model::Timestamp(crate::model::Timestamp::now().0 - chrono::Duration::seconds(3600));
    other_lock(&store, "elsewhere", 3, beat);
    let mut seat = Seat::new(store.lock_path(), timing(), Duration::ZERO, true)
        .with_hold(Duration::from_secs(60));
    poll_until_answering(&mut seat, &store);
    let later = SystemTime::now() + Duration::from_secs(5);
    assert!(
        seat.lease().holds(later),
        "a message newer than the take-over waits"
    );
    // Its heartbeat while it still held the lock (before it saw ours) changes nothing.
    let mut hb = crate::store::machines::Heartbeat::new(super::super::DAEMON, None, 1);
    hb.host = "elsewhere".into();
    hb.role = Some("active".into());
    hb.epoch = Some(3);
    hb.last_seen = crate::model::Timestamp::now();
    store.write_heartbeat(&hb).unwrap();
    seat.poll(&store).unwrap();
    assert!(seat.lease().holds(later) && !seat.take_released());
    // A heartbeat from before its last lock write changes nothing either.
    hb.role = Some("standby".into());
    hb.epoch = None;
    hb.last_seen = beat;
    store.write_heartbeat(&hb).unwrap();
    seat.poll(&store).unwrap();
    assert!(seat.lease().holds(later) && !seat.take_released());
    // It stood down: new messages are answered, those there now wait for its answers.
    hb.last_seen = crate::model::Timestamp::now();
    store.write_heartbeat(&hb).unwrap();
    let before = SystemTime::now() - Duration::from_secs(1);
    seat.poll(&store).unwrap();
    assert!(seat.take_released(), "the loop is woken");
    assert!(!seat.lease().holds(later), "a new message is answered");
    assert!(seat.lease().holds(before), "a message there before waits");
}

/// A fence nobody lifts ends after the stale time and a heartbeat (never past the hold);
/// with no hold there is no fence at all.
#[test]
fn a_fence_ends_after_the_stale_time_when_nobody_is_seen_and_never_with_no_hold() {
    let d = tempfile::tempdir().unwrap();
    let (store, _) = Store::init(&d.path().join("s")).unwrap();
    let mut seat = Seat::new(store.lock_path(), timing(), Duration::ZERO, true)
        .with_hold(Duration::from_secs(60));
    seat.fence(Some("elsewhere"), crate::model::Timestamp::now());
    let later = SystemTime::now() + Duration::from_secs(5);
    assert!(seat.lease().holds(later));
    std::thread::sleep(timing().stale_after + timing().heartbeat);
    seat.check_fence(&store);
    assert!(seat.take_released() && !seat.lease().holds(later));
    let mut none = Seat::new(store.lock_path(), timing(), Duration::ZERO, true);
    none.fence(Some("elsewhere"), crate::model::Timestamp::now());
    assert!(!none.lease().holds(later), "no hold configured: no fence");
}

/// Polls `seat` until it answers (it took the lock over), for at most 30 s.
fn poll_until_answering(seat: &mut Seat, store: &Store) {
    let deadline = Instant::now() + Duration::from_secs(30);
    while !seat.role().answers() {
        assert!(
            Instant::now() < deadline,
            "never took over: {:?}",
            seat.role()
        );
        seat.poll(store).unwrap();
        std::thread::sleep(Duration::from_millis(20));
    }
}
