//! braid's learners: the experience queue from the hot path, DQN and meta-learning training
//! (tch, behind the `torch` feature) and the model store.
#![warn(missing_docs)]
