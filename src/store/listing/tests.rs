use super::*;

#[test]
fn records_round_trip_whatever_the_text() {
    for (id, project, user, prio) in [
        ("a", "P", None, None),
        ("b-1.x", "we\tird\nname\\", Some("u\\t"), Some(-10)),
    ] {
        let r = Rec {
            id: id.into(),
            head: Some((
                -5,
                7,
                project.into(),
                user.map(Into::into),
                prio,
                Some((9, 1)),
            )),
        };
        let mut buf = Vec::new();
        r.write(&mut buf).unwrap();
        assert_eq!(buf.iter().filter(|b| **b == b'\n').count(), 1);
        let back = Rec::parse(std::str::from_utf8(&buf).unwrap()).unwrap();
        assert_eq!(&*back.id, id);
        let (s, n, p, u, pr, f) = back.head.unwrap();
        assert_eq!((s, n, &*p, u.as_deref(), pr), (-5, 7, project, user, prio));
        assert_eq!(f, Some((9, 1)));
    }
    let bad = Rec {
        id: "z".into(),
        head: None,
    };
    let mut buf = Vec::new();
    bad.write(&mut buf).unwrap();
    assert!(
        Rec::parse(std::str::from_utf8(&buf).unwrap())
            .unwrap()
            .head
            .is_none()
    );
    assert!(Rec::parse("garbage\n").is_none());
}

fn ids(src: &mut Source) -> Vec<(String, i64)> {
    let mut out = Vec::new();
    src.advance();
    while let Some(r) = src.current.take() {
        out.push((r.id.to_string(), r.key().0));
        src.advance();
    }
    out
}

/// A folder that changed is brought up to date from the old index's text: the heads of
/// names it had are kept (not read again), new files are read, and the order is the
/// queue time, then the id as it is (not as escaped: a tab sorts before a backslash).
#[test]
fn a_changed_folder_keeps_known_heads_in_order() {
    let d = tempfile::tempdir().unwrap();
    let dir = d.path().join("finished_jobs");
    std::fs::create_dir(&dir).unwrap();
    let cache = d.path().join("cache/finished_jobs.idx");
    let job = |t: &str| {
        format!("{{\"config\": {{\"project\": \"P\", \"queue_time\": \"2025-01-01T00:00:{t}Z\"}}}}")
    };
    for (name, t) in [
        ("c", "10"),
        ("a", "10"),
        ("b\\x", "10"),
        ("b\tc", "10"),
        ("z", "05"),
    ] {
        std::fs::write(dir.join(format!("{name}.json")), job(t)).unwrap();
    }
    std::fs::write(dir.join("bad.json"), "{").unwrap();
    let (mut src, bad, _) = open_index(&dir, "q", JobStatus::Finished, None, Some(&cache)).unwrap();
    assert_eq!(bad, vec!["bad".to_string()]);
    let t0 = 1735689600;
    let want = |a_time: i64| {
        vec![
            ("z".to_string(), t0 + 5),
            ("new".to_string(), t0 + 7),
            ("a".to_string(), a_time),
            ("b\tc".to_string(), t0 + 10),
            ("b\\x".to_string(), t0 + 10),
            ("c".to_string(), t0 + 10),
        ]
    };
    let mut first = want(t0 + 10);
    first.remove(1);
    assert_eq!(ids(&mut src), first);
    // Rewritten in place (a name keeps its head), and a new file: the folder changed.
    std::fs::write(dir.join("a.json"), job("59")).unwrap();
    std::fs::write(dir.join("new.json"), job("07")).unwrap();
    let (mut src, bad, _) = open_index(&dir, "q", JobStatus::Finished, None, Some(&cache)).unwrap();
    assert_eq!(bad, vec!["bad".to_string()]);
    assert_eq!(ids(&mut src), want(t0 + 10));
    // Without a cache the records are read afresh and kept in memory: same order.
    let (mut src, bad, _) = open_index(&dir, "q", JobStatus::Finished, None, None).unwrap();
    assert_eq!(bad, vec!["bad".to_string()]);
    assert_eq!(
        ids(&mut src),
        want(t0 + 59)
            .into_iter()
            .filter(|x| x.0 != "a")
            .chain([("a".to_string(), t0 + 59)])
            .collect::<Vec<_>>()
    );
}

/// A seek lands on the first record at or after the place, in a file body (with an
/// unreadable file's line before the records) and in memory, at every place and between.
#[test]
fn a_seek_lands_at_the_place_or_the_next_record() {
    let d = tempfile::tempdir().unwrap();
    let dir = d.path().join("finished_jobs");
    std::fs::create_dir(&dir).unwrap();
    let cache = d.path().join("cache/finished_jobs.idx");
    let job = |s: u32| {
        format!(
            "{{\"config\": {{\"project\": \"P\", \"queue_time\": \"2025-01-01T{:02}:{:02}:{:02}Z\"}}}}",
            s / 3600,
            s / 60 % 60,
            s % 60
        )
    };
    // Two jobs a second, every other second.
    for i in 0..700u32 {
        std::fs::write(dir.join(format!("j{i:04}.json")), job(i / 2 * 2)).unwrap();
    }
    std::fs::write(dir.join("bad.json"), "{").unwrap();
    for cache in [Some(cache.as_path()), None] {
        let (mut src, _, _) = open_index(&dir, "q", JobStatus::Finished, None, cache).unwrap();
        src.advance();
        let mut all = Vec::new();
        while let Some(r) = src.current.take() {
            all.push(r);
            src.advance();
        }
        assert_eq!(all.len(), 700);
        let listed = |r: &Rec| r.clone().listed("q", JobStatus::Finished, None).unwrap();
        for (i, r) in all.iter().enumerate() {
            let b = Bound::of(&listed(r));
            src.start().unwrap();
            src.seek(&b).unwrap();
            assert_eq!(src.current.as_ref().map(|c| &*c.id), Some(&*r.id), "at {i}");
        }
        // Between records (an odd second no job has): the next one.
        let l = listed(&all[101]);
        let mut b = Bound::of(&l);
        b = Bound::parse("1735689701.000000000/q/j0000").unwrap_or(b);
        assert_eq!(b.token(), "1735689701.000000000/q/j0000");
        src.seek(&b).unwrap();
        assert_eq!(src.current.as_ref().map(|c| &*c.id), Some("j0102"));
    }
}

/// A folder never indexed, large enough to be read by several threads: every job once, in
/// order, with the head its own file holds; files that are not jobs are named as before
/// (a damaged one, one over the size limit) or left out (a link, a FIFO, a conflict copy).
#[test]
fn a_folder_read_by_several_threads_is_indexed_as_one_thread_reads_it() {
    let d = tempfile::tempdir().unwrap();
    let dir = d.path().join("finished_jobs");
    std::fs::create_dir(&dir).unwrap();
    let cache = d.path().join("cache/finished_jobs.idx");
    let t0 = 1735689600;
    let mut want = Vec::new();
    for i in 0..3000i64 {
        // Times out of name order, so the sort is seen.
        let s = (i * 7919) % 3000;
        let body = format!(
            "{{\"config\": {{\"project\": \"P{}\", \"queue_time\": \"2025-01-01T{:02}:{:02}:{:02}Z\"}}}}",
            i % 3,
            s / 3600,
            s / 60 % 60,
            s % 60
        );
        std::fs::write(dir.join(format!("j{i:05}.json")), body).unwrap();
        want.push((format!("j{i:05}"), t0 + s));
    }
    want.sort_by(|a, b| (a.1, &a.0).cmp(&(b.1, &b.0)));
    std::fs::write(dir.join("bad.json"), "{").unwrap();
    let big = vec![b' '; crate::schema::MAX_DOCUMENT_BYTES as usize + 10];
    std::fs::write(dir.join("big.json"), big).unwrap();
    std::os::unix::fs::symlink(dir.join("j00001.json"), dir.join("link.json")).unwrap();
    nix::unistd::mkfifo(&dir.join("fifo.json"), nix::sys::stat::Mode::S_IRWXU).unwrap();
    std::fs::write(dir.join("j00002 (conflicted copy).json"), "{}").unwrap();
    let (mut src, mut bad, _) =
        open_index(&dir, "q", JobStatus::Finished, None, Some(&cache)).unwrap();
    bad.sort();
    assert_eq!(bad, vec!["bad".to_string(), "big".to_string()]);
    assert_eq!(ids(&mut src), want);
    // The project each file names, not another's.
    let (mut src, _, _) = open_index(&dir, "q", JobStatus::Finished, None, Some(&cache)).unwrap();
    src.advance();
    while let Some(r) = src.current.take() {
        let i: usize = r.id[1..].parse().unwrap();
        assert_eq!(&*r.head.unwrap().2, format!("P{}", i % 3));
        src.advance();
    }
}

/// The lines of many entries come back in the entries' order, whoever read them.
#[test]
fn lines_read_by_several_threads_keep_the_entries_order() {
    let d = tempfile::tempdir().unwrap();
    let folder = build::Folder::open(d.path());
    let entries: Vec<_> = (0..5000)
        .map(|i| (build::Kind::Document, format!("n{i}").into_boxed_str()))
        .collect();
    let line = |_: &build::Folder<'_>, e: Scanned<'_>| match e {
        Scanned::Document(n) if n != "n77" => Some(n.to_string()),
        _ => None,
    };
    let got = build::lines_of(&folder, &entries, &line);
    let want: Vec<_> = (0..5000)
        .map(|i| (i != 77).then(|| format!("n{i}")))
        .collect();
    assert_eq!(got, want);
}
