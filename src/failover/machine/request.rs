//! The request, and what this run learned about it: which families refused its content and
//! which context windows it overflowed. Kept across rounds: the content does not change.

use std::collections::BTreeMap;

use crate::catalog::ModelInfo;
use crate::failover::candidates::family;
use crate::failover::tokens::estimate_tokens;
use crate::rpc::ImageContent;

#[derive(Debug)]
pub(super) struct Request {
    prompt: String,
    images: Vec<ImageContent>,
    /// `estimate_tokens(prompt)`, counted once.
    tokens: u64,
    /// Families avoided after a content-policy refusal, with why: the content is the reason,
    /// so a relative would refuse it too.
    avoided_families: BTreeMap<String, String>,
    /// After a context overflow only larger windows qualify, in every later round too.
    larger_context_than: Option<u64>,
    /// After an answer was cut at an output limit of this many tokens (0: unknown), models
    /// with a larger limit go first.
    larger_output_than: Option<u64>,
}

impl Request {
    pub(super) fn new(prompt: String, images: Vec<ImageContent>) -> Request {
        Request {
            tokens: estimate_tokens(&prompt),
            prompt,
            images,
            avoided_families: BTreeMap::new(),
            larger_context_than: None,
            larger_output_than: None,
        }
    }

    pub(super) fn prompt(&self) -> &str {
        &self.prompt
    }

    pub(super) fn images(&self) -> &[ImageContent] {
        &self.images
    }

    pub(super) fn needs_images(&self) -> bool {
        !self.images.is_empty()
    }

    /// The request's size in tokens, estimated never to overshoot.
    pub(super) fn tokens(&self) -> u64 {
        self.tokens
    }

    /// `model` refused the content: its family is avoided for the rest of the run.
    pub(super) fn avoid_family_of(&mut self, model: &ModelInfo, why: String) {
        self.avoided_families.insert(family(model), why);
    }

    pub(super) fn avoided_families(&self) -> &BTreeMap<String, String> {
        &self.avoided_families
    }

    /// The request overflowed a context window of `window` tokens: only larger ones qualify.
    pub(super) fn overflowed(&mut self, window: u64) {
        self.larger_context_than = Some(self.larger_context_than.map_or(window, |w| w.max(window)));
    }

    /// An answer was cut at `model`'s output limit: larger limits are preferred from now on.
    pub(super) fn truncated(&mut self, model: &ModelInfo) {
        let limit = model.max_tokens.unwrap_or(0);
        self.larger_output_than = Some(self.larger_output_than.map_or(limit, |l| l.max(limit)));
    }

    pub(super) fn larger_output_than(&self) -> Option<u64> {
        self.larger_output_than
    }

    pub(super) fn larger_context_than(&self) -> Option<u64> {
        self.larger_context_than
    }

    /// `model`'s context window is surely too small for the request (or no larger than one
    /// it already overflowed).
    pub(super) fn too_large_for(&self, model: &ModelInfo) -> bool {
        model.context_window.is_some_and(|w| w < self.tokens)
            || self
                .larger_context_than
                .is_some_and(|c| model.context_window_or_zero() <= c)
    }

    /// `model` could ever take this request: it sees the images, its window is large enough and
    /// its family did not refuse the content. Breakers are not looked at.
    pub(super) fn fits(&self, model: &ModelInfo) -> bool {
        (self.images.is_empty() || model.accepts_images())
            && !self.too_large_for(model)
            && !self.avoided_families.contains_key(&family(model))
    }
}
