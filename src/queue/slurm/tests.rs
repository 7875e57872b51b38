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
