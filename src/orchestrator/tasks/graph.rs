//! The dependency graph of tasks: every dependency exists and may be seen by whoever asked,
//! no cycle, and an order with each task after what it depends on.

use crate::model::{Task, TaskRef};
use crate::permissions::Caller;
use crate::store::Store;
use std::collections::{BTreeMap, BTreeSet};

/// Checks the tasks of one PRD (`tasks`, all of the same PRD) against each other and the
/// store: ids unique, each dependency a task of the list or an existing task of another PRD
/// that `who` may see, and no cycle (through other PRDs' tasks too). The error names the
/// tasks.
pub fn check(store: &Store, who: &Caller, tasks: &[Task]) -> Result<(), String> {
    let mut local: BTreeMap<&str, &Task> = BTreeMap::new();
    for t in tasks {
        if let Some(p) = crate::model::id_problem(&t.id) {
            return Err(format!("task id {:?} {p}", t.id));
        }
        if local.insert(t.id.as_str(), t).is_some() {
            return Err(format!("task id {:?} appears twice", t.id));
        }
    }
    let Some(prd) = tasks.first().map(|t| t.prd.clone()) else {
        return Ok(());
    };
    // Every task reachable, with its dependencies.
    let mut deps: BTreeMap<TaskRef, Vec<TaskRef>> = BTreeMap::new();
    let mut todo: Vec<TaskRef> = Vec::new();
    for t in tasks {
        let r = TaskRef {
            prd: prd.clone(),
            task: t.id.clone(),
        };
        let ds = t.dependencies();
        for d in &ds {
            if let Some(p) =
                crate::model::id_problem(&d.task).or_else(|| crate::model::id_problem(&d.prd))
            {
                return Err(format!("task {}: dependency {d} {p}", t.id));
            }
            if *d == r {
                return Err(format!("task {} depends on itself", t.id));
            }
            if d.prd == prd && !local.contains_key(d.task.as_str()) {
                return Err(format!(
                    "task {} depends on {}, which is not a task of this list (unknown dependency)",
                    t.id, d.task
                ));
            }
            if d.prd != prd {
                todo.push(d.clone());
            }
        }
        deps.insert(r, ds);
    }
    let mut seen_prds: BTreeMap<String, bool> = BTreeMap::new();
    while let Some(r) = todo.pop() {
        if deps.contains_key(&r) {
            continue;
        }
        let visible = *seen_prds
            .entry(r.prd.clone())
            .or_insert_with(|| prd_visible(store, who, &r.prd));
        if !visible {
            return Err(format!(
                "dependency {r}: no such PRD, or its project is not one {} may see (PRD §10)",
                who.user_id().unwrap_or("the caller")
            ));
        }
        let task = store
            .task(&r)
            .map_err(|_| format!("dependency {r}: PRD {} has no task {}", r.prd, r.task))?
            .1;
        let ds = task.dependencies();
        todo.extend(ds.iter().filter(|d| !deps.contains_key(*d)).cloned());
        deps.insert(r, ds);
    }
    if let Some(cycle) = find_cycle(&deps) {
        let names: Vec<String> = cycle.iter().map(|r| short(r, &prd)).collect();
        return Err(format!(
            "the dependencies form a cycle: {}",
            names.join(" → ")
        ));
    }
    Ok(())
}

fn short(r: &TaskRef, prd: &str) -> String {
    if r.prd == prd {
        r.task.clone()
    } else {
        r.to_string()
    }
}

/// Whether `who` may see PRD `id` (and it exists).
pub fn prd_visible(store: &Store, who: &Caller, id: &str) -> bool {
    let Ok((_, _, prd)) = store.find_prd(id) else {
        return false;
    };
    let project = store.project(&prd.project).ok();
    who.can_see_prd(&prd, project.as_ref())
}

/// A cycle of `deps` (its tasks in order, the first repeated last), if there is one.
/// Dependencies outside the map are leaves.
fn find_cycle(deps: &BTreeMap<TaskRef, Vec<TaskRef>>) -> Option<Vec<TaskRef>> {
    // Iterative depth-first search: 0 unseen, 1 on the path, 2 finished.
    let mut state: BTreeMap<&TaskRef, u8> = BTreeMap::new();
    for start in deps.keys() {
        if state.get(start).copied().unwrap_or(0) != 0 {
            continue;
        }
        let mut path: Vec<(&TaskRef, usize)> = vec![(start, 0)];
        state.insert(start, 1);
        while let Some((node, i)) = path.last().copied() {
            let next = deps.get(node).and_then(|d| d.get(i));
            match next {
                None => {
                    state.insert(node, 2);
                    path.pop();
                }
                Some(n) => {
                    if let Some(top) = path.last_mut() {
                        top.1 += 1;
                    }
                    let Some((key, _)) = deps.get_key_value(n) else {
                        continue;
                    };
                    match state.get(key).copied().unwrap_or(0) {
                        0 => {
                            state.insert(key, 1);
                            path.push((key, 0));
                        }
                        1 => {
                            let from = path.iter().position(|(p, _)| *p == key).unwrap_or(0);
                            let mut c: Vec<TaskRef> =
                                path[from..].iter().map(|(p, _)| (*p).clone()).collect();
                            c.push(key.clone());
                            return Some(c);
                        }
                        _ => {}
                    }
                }
            }
        }
    }
    None
}

/// The tasks of one PRD in an order where each comes after the tasks of the list it depends
/// on (ties by id). Assumes [`check`] passed (a cycle's tasks are left at the end).
pub fn order(tasks: &[Task]) -> Vec<&Task> {
    let ids: BTreeSet<&str> = tasks.iter().map(|t| t.id.as_str()).collect();
    let mut placed: BTreeSet<&str> = BTreeSet::new();
    let mut out: Vec<&Task> = Vec::with_capacity(tasks.len());
    let mut sorted: Vec<&Task> = tasks.iter().collect();
    sorted.sort_by(|a, b| a.id.cmp(&b.id));
    while out.len() < tasks.len() {
        let before = out.len();
        for t in &sorted {
            if placed.contains(t.id.as_str()) {
                continue;
            }
            let ready = t.dependencies().iter().all(|d| {
                d.prd != t.prd || !ids.contains(d.task.as_str()) || placed.contains(d.task.as_str())
            });
            if ready {
                placed.insert(t.id.as_str());
                out.push(t);
            }
        }
        if out.len() == before {
            out.extend(sorted.iter().filter(|t| !placed.contains(t.id.as_str())));
            break;
        }
    }
    out
}
