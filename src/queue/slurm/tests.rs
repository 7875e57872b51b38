use super::*;
use crate::model::ResourceLimits;
use serde_json::json;

#[test]
fn times_and_limits() {
    assert_eq!(time_minutes(55), 1);
    assert_eq!(time_minutes(56), 2);
    assert_eq!(time_minutes(3600), 61);
    assert_eq!(parse_elapsed("0:07"), Some(7));
    assert_eq!(parse_elapsed("1:02:03"), Some(3723));
    assert_eq!(parse_elapsed("2-00:00:01"), Some(172_801));
    assert_eq!(parse_elapsed("x"), None);
    assert_eq!(mem_arg(&serde_json::json!(1)), Some("1M".into()));
    assert_eq!(mem_arg(&serde_json::json!("3145728")), Some("3M".into()));
    assert_eq!(mem_arg(&serde_json::json!("4G")), Some("4G".into()));
    assert_eq!(cpus_arg("250%"), Some(3));
    assert_eq!(cpus_arg("abc"), None);
}

#[test]
fn extra_args_never_raise_priority() {
    let refused = |a: &str| bad_extra_arg(0, a);
    for a in [
        "--priority=TOP",
        "--priority=100",
        "--nice=-10000",
        "--nice=-1",
        "--nice=-0",
        "--nice=",
        "--nice=1e9",
        "--nice=1234567890",
        "--uid=0",
        "--gid=0",
        "--chdir=/root",
        "--output=/etc/x",
    ] {
        assert!(refused(a).is_some(), "{a}");
    }
    assert!(refused("--nice=-5").unwrap().contains("0 or more"));
    for a in [
        "--nice",
        "--nice=0",
        "--nice=+5",
        "--nice=100",
        "--constraint=x",
    ] {
        assert_eq!(refused(a), None, "{a}");
    }
}

#[test]
fn sbatch_line() {
    let cfg = SlurmConfig {
        partition: Some("debug".into()),
        extra_args: vec!["--constraint=x".into()],
        ..SlurmConfig::default()
    };
    let limits = ResourceLimits {
        memory_max: Some(serde_json::json!("2G")),
        cpu_quota: Some("200%".into()),
        tasks_max: None,
    };
    let a = sbatch_args(
        &cfg,
        "j1",
        60,
        Some(&limits),
        Path::new("/s/logs/o.out"),
        Path::new("/s/Queues/q/Jobs/running_jobs/j1.json"),
        &["/bin/agent-worker".into(), "it's".into()],
    );
    assert!(!a.iter().any(|x| x == "--hold"), "{a:?}");
    assert_eq!(a[0], "--constraint=x");
    for want in [
        "--job-name=agentstore-j1",
        "--time=2",
        "--partition=debug",
        "--mem=2G",
        "--cpus-per-task=2",
        "--output=/s/logs/o.out",
    ] {
        assert!(a.iter().any(|x| x == want), "{want} missing from {a:?}");
    }
    let wrap = a.last().unwrap();
    assert!(
        wrap.ends_with(r"; exec '/bin/agent-worker' 'it'\''s'")
            && wrap.contains("'/s/Queues/q/Jobs/running_jobs/j1.json'"),
        "{wrap}"
    );
}

#[test]
fn partition_limits() {
    let out = "big*|infinite|64|512000+\nshort|2:00|2|1000\nshort|2:00|4+|800\nbad\n";
    let short = parse_sinfo(out, Some("short")).unwrap();
    assert_eq!(short.max_time, Some(120));
    assert_eq!((short.cpus, short.mem_mib), (Some(4), Some(1000)));
    let big = parse_sinfo(out, None).unwrap();
    assert_eq!((big.name.as_str(), big.max_time), ("big", None));
    assert_eq!(parse_sinfo(out, Some("nosuch")), None);
    assert_eq!(beyond_partition(&short, 115, None), None);
    assert!(
        beyond_partition(&short, 116, None)
            .unwrap()
            .contains("--time=3")
    );
    let rl = |cpu: &str, mem: serde_json::Value| ResourceLimits {
        memory_max: Some(mem),
        cpu_quota: Some(cpu.into()),
        tasks_max: None,
    };
    assert_eq!(
        beyond_partition(&short, 60, Some(&rl("400%", json!("1000M")))),
        None
    );
    assert!(
        beyond_partition(&short, 60, Some(&rl("500%", json!(1))))
            .unwrap()
            .contains("--cpus-per-task=5")
    );
    assert!(
        beyond_partition(&short, 60, Some(&rl("100%", json!("1G"))))
            .unwrap()
            .contains("--mem=1024M")
    );
    assert_eq!(mem_mib(&json!("3K")), Some(1));
    assert_eq!(mem_mib(&json!(2_097_152)), Some(2));
}

#[test]
fn slurm_job_ids_are_checked() {
    for ok in ["1", "123", "123_4"] {
        assert!(is_slurm_job_id(ok), "{ok}");
    }
    for bad in [
        "",
        "--user=root",
        "1 2",
        "1;c",
        "_1",
        "1_",
        "-1",
        "1,2",
        "12a",
    ] {
        assert!(!is_slurm_job_id(bad), "{bad}");
    }
}

#[test]
fn states_and_errors() {
    let l = parse_squeue("12|agentstore-a|TIMEOUT|TimeLimit|1:05\nbad line\n");
    assert_eq!(l.len(), 1);
    assert_eq!(l[0].elapsed, 65);
    assert!(is_terminal("TIMEOUT") && !is_terminal("PENDING"));
    assert_eq!(
        end_error(&l[0], 30, None, None),
        "Job timeout after 65s (limit: 30s)"
    );
    let nf = SlurmJob {
        state: "NODE_FAIL".into(),
        reason: "NodeDown".into(),
        ..l[0].clone()
    };
    assert!(end_error(&nf, 30, None, None).contains("NODE_FAIL (reason: NodeDown)"));
    let c = end_error(&nf, 30, Some(&EndCause::Cancelled("alice".into())), None);
    assert_eq!(c, "Job cancelled by alice");
    assert!(
        classify("sbatch: error: Batch job submission failed: Unable to contact slurm controller (connect failure)")
            .is_transient()
    );
    // The queue's own settings refused: every job would be, so they stay queued.
    let p = classify("sbatch: error: invalid partition specified: nosuch");
    assert!(
        matches!(p, SlurmError::Settings(_)) && p.is_transient(),
        "{p:?}"
    );
    let a = classify(
        "sbatch: error: Batch job submission failed: Invalid account or account/partition combination specified",
    );
    assert!(matches!(a, SlurmError::Settings(_)), "{a:?}");
    // A refusal of one job fails that job.
    assert!(
        !classify("sbatch: error: Batch job submission failed: Requested time limit is invalid (missing or exceeds some limit)")
            .is_transient()
    );
}

/// One `squeue` line of job `id`'s Slurm job `sid`.
fn listed(id: &str, sid: &str, state: &str, reason: &str, elapsed: u64) -> SlurmJob {
    SlurmJob {
        id: sid.into(),
        name: format!("{JOB_NAME_PREFIX}{id}"),
        state: state.into(),
        reason: reason.into(),
        elapsed,
    }
}

#[test]
fn an_squeue_answer_releases_our_holds_and_cancels_what_is_over_its_time() {
    let mut s = SlurmState::default();
    s.adopt("held", Tracked::new("11", 60, "", None));
    s.adopt("admin-held", Tracked::new("12", 60, "", None));
    s.adopt("late", Tracked::new("13", 60, "", None));
    s.adopt("busy", Tracked::new("14", 60, "", None));
    let now = Instant::now();
    s.poll_at = Some(now + std::time::Duration::from_secs(30));
    let answer = [
        listed("held", "11", "PENDING", "JobHeldUser", 0),
        listed("admin-held", "12", "PENDING", "JobHeldAdmin", 0),
        listed("late", "13", "RUNNING", "None", 60),
        listed("busy", "14", "RUNNING", "None", 59),
    ];
    let seen = s.observe(&answer, |_| true, now);
    assert_eq!(seen.release, ["11"], "our own hold only");
    assert_eq!(seen.over, ["late"]);
    assert!(seen.ended.is_empty());
    assert_eq!(s.counts(), (2, 2));
    assert_eq!(
        s.poll_at,
        Some(now + BUSY_POLL),
        "states changed: look again soon"
    );
    // A job already being stopped is not cancelled again.
    s.jobs.get_mut("late").unwrap().end = Some(EndCause::Timeout);
    let seen = s.observe(&answer, |_| true, now);
    assert!(seen.over.is_empty());
}

#[test]
fn a_job_ends_at_once_when_its_worker_wrote_it_and_after_a_grace_when_slurm_says_so() {
    let mut s = SlurmState::default();
    s.adopt("wrote", Tracked::new("21", 600, "RUNNING", None));
    s.adopt("failed", Tracked::new("22", 600, "RUNNING", None));
    s.adopt("gone", Tracked::new("23", 600, "RUNNING", None));
    s.adopt("forged", Tracked::new("1;rm", 600, "RUNNING", None));
    let t0 = Instant::now();
    s.poll_at = Some(t0 + std::time::Duration::from_secs(30));
    // 21 is listed under another job's name: not ours, so "wrote" is judged by its file.
    let answer = [
        listed("other", "21", "RUNNING", "None", 5),
        listed("failed", "22", "FAILED", "NonZeroExitCode", 5),
    ];
    let seen = s.observe(&answer, |id| id != "wrote", t0);
    assert_eq!(seen.ended, [("wrote".to_string(), None)]);
    assert!(s.tracks("wrote"), "settling it is the caller's");
    assert_eq!(s.poll_at, Some(t0 + BUSY_POLL));
    s.jobs.remove("wrote");
    // Seen ended (or unlisted) less than SETTLE_GRACE ago: the worker may still write.
    let seen = s.observe(&answer, |_| true, t0 + SETTLE_GRACE / 2);
    assert!(seen.ended.is_empty(), "{seen:?}");
    let seen = s.observe(&answer, |_| true, t0 + SETTLE_GRACE);
    let ended: Vec<_> = seen
        .ended
        .iter()
        .map(|(id, j)| {
            (
                id.as_str(),
                j.as_ref().map(|j| (j.state.as_str(), j.reason.as_str())),
            )
        })
        .collect();
    assert_eq!(
        ended,
        [
            ("failed", Some(("FAILED", "NonZeroExitCode"))),
            (
                "forged",
                Some((
                    "UNKNOWN",
                    "its runtime.slurm_job_id \"1;rm\" is not a Slurm job id"
                ))
            ),
            (
                "gone",
                Some(("UNKNOWN", "no longer listed by squeue as agentstore-gone"))
            ),
        ]
    );
    // Back in a live state, a job's grace starts again.
    let back = [listed("failed", "22", "RUNNING", "None", 6)];
    s.observe(&back, |_| true, t0 + SETTLE_GRACE);
    assert_eq!(s.jobs["failed"].ended_at, None);
}

#[test]
fn nothing_tracked_means_no_poll_due() {
    let mut s = SlurmState::default();
    s.poll_now();
    assert_eq!(s.deadline(), None);
    s.adopt("j", Tracked::new("1", 60, "", None));
    assert!(s.deadline().is_some_and(|at| at <= Instant::now()));
    assert!(s.tracks("j") && !s.tracks("k"));
    assert_eq!(s.job_ids().collect::<Vec<_>>(), ["j"]);
}

#[test]
fn a_probe_that_did_not_complete_stops_all_submissions() {
    let mut s = SlurmState::default();
    assert_eq!(s.free(usize::MAX), SUBMIT_BATCH);
    s.adopt("j", Tracked::new("1", 60, "", None));
    assert_eq!(s.free(3), 2);
    assert_eq!(s.free(0), 0);
    s.probe = Some(("7".into(), "/store/logs/.slurm-probe-q-1".into()));
    let pending = [listed("probe-q", "7", "PENDING", "Priority", 0)];
    assert_eq!(s.probe_ended(&pending), None, "not ended yet");
    let done = [listed("probe-q", "7", "COMPLETED", "None", 1)];
    let (sid, _, state) = s.probe_ended(&done).unwrap();
    assert_eq!((sid.as_str(), state.as_str()), ("7", "COMPLETED"));
    assert!(s.probe.is_none() && !s.unshared);
    assert_eq!(s.free(3), 2);
    // A probe Slurm no longer lists ended too (UNKNOWN): the store is not shared.
    s.probe = Some(("8".into(), "/store/logs/.slurm-probe-q-1".into()));
    let (_, _, state) = s.probe_ended(&[]).unwrap();
    assert_eq!(state, "UNKNOWN");
    assert!(s.unshared);
    assert_eq!(s.free(usize::MAX), 0);
}

#[test]
fn the_status_says_when_it_changed() {
    let mut s = SlurmState::default();
    assert_eq!(s.set_status(None), None);
    assert_eq!(s.set_status(Some("down".into())), Some(Some("down".into())));
    assert_eq!(s.set_status(Some("down".into())), None);
    assert_eq!(s.status(), Some("down".into()));
    assert_eq!(s.set_status(None), Some(None));
}
