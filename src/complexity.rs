//! `--task-complexity auto` estimate → thinking level. Pure.
//! PLACEHOLDER: replaced by the full estimate.
