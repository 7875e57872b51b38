//! The task list an agent answers `create-tasks` with: a JSON block
//! (`{"tasks": [{"id", "title", "description", "acceptance_criteria", "depends_on"}]}`),
//! found in the agent's text and checked field by field.

use serde::Deserialize;

/// What `create-tasks` asks the agent for, appended to its prompt.
pub const FORMAT_REQUEST: &str = r#"## Answer format

End your answer with the task list as ONE fenced JSON block of this shape (this example has one task; write yours the same way):

```json
{"tasks": [{"id": "example-task", "title": "Short title", "description": "What to do, for an engineer who sees only this task and the PRD", "acceptance_criteria": ["How to tell it is done"], "depends_on": []}]}
```

Ids are letters, digits, '.', '_' and '-' (unique in the list). `depends_on` names tasks of this list by id, or a task of another PRD as <prd id>/<task id>; the dependencies must not form a cycle."#;

/// One task as the agent wrote it.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TaskSpec {
    /// Task id (unique in the list).
    pub id: String,
    /// Short title.
    pub title: String,
    /// What to do.
    #[serde(default)]
    pub description: String,
    /// When it is done.
    #[serde(default)]
    pub acceptance_criteria: Vec<String>,
    /// Tasks first.
    #[serde(default)]
    pub depends_on: Vec<String>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct TaskList {
    tasks: Vec<TaskSpec>,
}

/// Most tasks one list may hold.
pub const MAX_TASKS: usize = 500;

/// The task list in `text`: the last fenced ```json block that parses as a task list, else
/// the whole text as JSON. The error says what was wrong, naming the field.
pub fn task_list(text: &str) -> Result<Vec<TaskSpec>, String> {
    let mut candidates: Vec<&str> = fenced_blocks(text);
    candidates.reverse();
    candidates.push(text.trim());
    let mut first_error = None;
    for c in candidates {
        match parse_one(c) {
            Ok(list) => return Ok(list),
            Err(e) => {
                if first_error.is_none() {
                    first_error = Some(e);
                }
            }
        }
    }
    Err(first_error.unwrap_or_else(|| "no JSON task list in the answer".into()))
}

fn parse_one(text: &str) -> Result<Vec<TaskSpec>, String> {
    let value = crate::model::strict::parse_value(text.as_bytes())
        .map_err(|e| format!("the task list is not valid JSON: {e}"))?;
    let value = match value {
        // A bare array of tasks is accepted too.
        serde_json::Value::Array(items) => serde_json::json!({ "tasks": items }),
        other => other,
    };
    let list: TaskList = serde_path_to_error_free(&value)?;
    if list.tasks.is_empty() {
        return Err("the task list is empty (/tasks has no items)".into());
    }
    if list.tasks.len() > MAX_TASKS {
        return Err(format!(
            "the task list has {} tasks; at most {MAX_TASKS} are accepted",
            list.tasks.len()
        ));
    }
    Ok(list.tasks)
}

/// Deserialises, naming the task whose fields are wrong.
fn serde_path_to_error_free(value: &serde_json::Value) -> Result<TaskList, String> {
    let Some(obj) = value.as_object() else {
        return Err("the task list must be a JSON object with a \"tasks\" array".into());
    };
    if let Some(extra) = obj.keys().find(|k| *k != "tasks") {
        return Err(format!(
            "/{extra}: unknown field (the task list holds only \"tasks\")"
        ));
    }
    let Some(items) = obj.get("tasks").and_then(|t| t.as_array()) else {
        return Err("/tasks: missing or not an array".into());
    };
    let mut tasks = Vec::with_capacity(items.len());
    for (i, item) in items.iter().enumerate() {
        let t: TaskSpec =
            serde_json::from_value(item.clone()).map_err(|e| format!("/tasks/{i}: {e}"))?;
        tasks.push(t);
    }
    Ok(TaskList { tasks })
}

/// The contents of the fenced code blocks of `text` marked `json` (or unmarked).
fn fenced_blocks(text: &str) -> Vec<&str> {
    let mut out = Vec::new();
    let mut rest = text;
    while let Some(start) = rest.find("```") {
        let after = &rest[start + 3..];
        let Some(nl) = after.find('\n') else { break };
        let lang = after[..nl].trim();
        let body = &after[nl + 1..];
        let Some(end) = body.find("```") else { break };
        if lang.is_empty() || lang.eq_ignore_ascii_case("json") {
            out.push(body[..end].trim());
        }
        rest = &body[end + 3..];
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn finds_the_fenced_block() {
        let t = "Here:\n```json\n{\"tasks\": [{\"id\": \"a\", \"title\": \"A\"}]}\n```\nDone.";
        let l = task_list(t).unwrap();
        assert_eq!(l[0].id, "a");
        assert!(l[0].depends_on.is_empty());
    }

    #[test]
    fn names_the_bad_field() {
        let t = "```json\n{\"tasks\": [{\"id\": \"a\", \"title\": \"A\"}, {\"id\": \"b\", \"title\": 3}]}\n```";
        let e = task_list(t).unwrap_err();
        assert!(e.contains("/tasks/1"), "{e}");
        let e = task_list("no json here").unwrap_err();
        assert!(e.contains("not valid JSON"), "{e}");
        let e = task_list("{\"tasks\": []}").unwrap_err();
        assert!(e.contains("empty"), "{e}");
    }
}
