//! What a batch learned about its schemas (`--output-schema`, a job's `schema`): the models
//! that could not follow each, so the batch's later jobs with that schema try them last.

use std::collections::{BTreeSet, VecDeque};

use crate::job::OutputSchema;

/// How many schemas a batch remembers (the oldest is forgotten first).
const KEPT: usize = 64;

/// What a batch learned about its schemas: the models that could not follow each (by the
/// schema's id), so its later jobs with that schema try them last. A model that followed it
/// in a later job is forgotten for it again. Bounded: the most recent few schemas are kept.
#[derive(Debug, Default)]
pub struct SchemaMemory {
    misses: VecDeque<(u64, BTreeSet<String>)>,
}

impl SchemaMemory {
    /// The models to try last for `schema`.
    pub fn avoid(&self, schema: &OutputSchema) -> BTreeSet<String> {
        let id = schema.schema.id();
        self.misses
            .iter()
            .find(|(s, _)| *s == id)
            .map(|(_, models)| models.clone())
            .unwrap_or_default()
    }

    /// What a job under `schema` showed: the models whose answers it rejected (and that did
    /// not answer in the end), and the model that answered.
    pub fn learn(&mut self, schema: &OutputSchema, ended: &crate::job::Ended) {
        use crate::failover::classify::FailureClass;
        let answered = match &ended.end {
            crate::job::JobEnd::Machine(crate::failover::Outcome::Answer { model, .. }) => {
                Some(model.key().to_string())
            }
            _ => None,
        };
        let failed: Vec<String> = ended
            .attempts
            .iter()
            .filter(|a| {
                a.failure
                    .as_ref()
                    .is_some_and(|f| f.class == FailureClass::Schema)
            })
            .map(|a| a.model.to_string())
            .filter(|m| answered.as_ref() != Some(m))
            .collect();
        if failed.is_empty() && answered.is_none() {
            return;
        }
        let id = schema.schema.id();
        let at = match self.misses.iter().position(|(s, _)| *s == id) {
            Some(at) => at,
            None => {
                if self.misses.len() == KEPT {
                    self.misses.pop_front();
                }
                self.misses.push_back((id, Default::default()));
                self.misses.len() - 1
            }
        };
        if let Some((_, models)) = self.misses.get_mut(at) {
            models.extend(failed);
            if let Some(m) = &answered {
                models.remove(m);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::catalog::ModelInfo;
    use crate::failover::classify::{Classification, FailureClass, Scope};
    use crate::failover::{Attempt, Outcome};
    use crate::job::{Ended, JobEnd};

    fn schema(text: &str) -> OutputSchema {
        OutputSchema {
            file: "s.json".into(),
            schema: std::sync::Arc::new(
                crate::schema::Schema::from_bytes(text.as_bytes()).expect("schema"),
            ),
        }
    }

    fn attempt(model: &str, class: Option<FailureClass>) -> Attempt {
        Attempt {
            model: model.into(),
            failure: class.map(|class| Classification {
                class,
                scope: Scope::Round,
                status: None,
                matched: String::new(),
                stated: None,
            }),
            error: None,
            duration_ms: 0,
            usage: Default::default(),
            capacity_signal: false,
            partial: None,
            silent_ms: None,
            rejected: None,
        }
    }

    fn answered_by(provider: &str, attempts: Vec<Attempt>) -> Ended {
        let mut ended = Ended::bare(JobEnd::Machine(Outcome::Answer {
            text: "{}".into(),
            model: ModelInfo {
                provider: provider.into(),
                id: "m".into(),
                name: None,
                base_url: None,
                reasoning: false,
                input: None,
                context_window: None,
                max_tokens: None,
            },
            json: None,
        }));
        ended.attempts = attempts;
        ended
    }

    #[test]
    fn misses_are_remembered_per_schema_and_forgotten_on_success() {
        let (review, list) = (
            schema(r#"{"type":"object"}"#),
            schema(r#"{"type":"array"}"#),
        );
        let mut memory = SchemaMemory::default();
        let schema_miss = Some(FailureClass::Schema);
        memory.learn(
            &review,
            &answered_by(
                "b",
                vec![
                    attempt("a/m", schema_miss),
                    attempt("a/m", schema_miss),
                    attempt("c/m", Some(FailureClass::Quota)),
                    attempt("b/m", None),
                ],
            ),
        );
        assert_eq!(memory.avoid(&review), BTreeSet::from(["a/m".to_string()]));
        assert!(
            memory.avoid(&list).is_empty(),
            "another schema, another memory"
        );
        // a/m follows the schema in a later job (after its second ask): forgotten.
        memory.learn(
            &review,
            &answered_by("a", vec![attempt("a/m", schema_miss), attempt("a/m", None)]),
        );
        assert!(memory.avoid(&review).is_empty());
    }

    #[test]
    fn the_memory_is_bounded() {
        let mut memory = SchemaMemory::default();
        let first = schema(r#"{"title":"0"}"#);
        let miss = |m: &str| {
            answered_by(
                "b",
                vec![attempt(m, Some(FailureClass::Schema)), attempt("b/m", None)],
            )
        };
        memory.learn(&first, &miss("a/m"));
        for i in 1..=KEPT {
            memory.learn(&schema(&format!(r#"{{"title":"{i}"}}"#)), &miss("a/m"));
        }
        assert_eq!(memory.misses.len(), KEPT);
        assert!(memory.avoid(&first).is_empty(), "the oldest is forgotten");
    }
}
