//! The `braid-model` file format: round trips, and every kind of bad file is refused with an
//! error that names the offending field or tensor.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::HashMap;

use braid_learners::{Component, Model, ModelError, Provenance};
use braid_sched_core::nn::{Activation, Linear, Lstm, Mlp};
use safetensors::tensor::{Dtype, TensorView};

fn values(n: usize, seed: f32) -> Vec<f32> {
    (0..n)
        .map(|i| ((i as f32 + seed) * 0.37).sin() * 0.3)
        .collect()
}

fn mlp(widths: &[usize]) -> Mlp {
    let layers = widths
        .windows(2)
        .enumerate()
        .map(|(i, w)| {
            Linear::new(
                "l",
                w[0],
                w[1],
                values(w[0] * w[1], i as f32),
                values(w[1], 9.0),
            )
            .unwrap()
        })
        .collect();
    Mlp::new(layers, Activation::Relu).unwrap()
}

fn lstm(input: usize, hidden: usize) -> Lstm {
    let g = 4 * hidden;
    Lstm::new(
        input,
        hidden,
        &values(g * input, 1.),
        &values(g * hidden, 2.),
        &values(g, 3.),
        &values(g, 4.),
    )
    .unwrap()
}

fn sample() -> Model {
    let mut provenance = Provenance::new(1_763_712_000, "unit test, seed 1");
    provenance
        .extra
        .insert("scenario".to_owned(), "falcon-fig7".to_owned());
    Model::new("edar-dqn", provenance)
        .unwrap()
        .with("repr", Component::Lstm(lstm(3, 8)))
        .unwrap()
        .with("core", Component::Mlp(mlp(&[8, 128, 32, 2])))
        .unwrap()
}

#[test]
fn round_trips_through_bytes_and_files() {
    let model = sample();
    let bytes = model.to_bytes().unwrap();
    let back = Model::from_bytes(&bytes).unwrap();
    assert_eq!(back, model);
    assert_eq!(back.kind(), "edar-dqn");
    assert_eq!(back.provenance().extra["scenario"], "falcon-fig7");
    assert_eq!(
        back.mlp("core").unwrap().widths().collect::<Vec<_>>(),
        [8, 128, 32, 2]
    );
    assert_eq!(back.lstm("repr").unwrap().hidden_size(), 8);

    let dir = std::env::temp_dir().join(format!("braid-model-test-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("edar.safetensors");
    model.save(&path).unwrap();
    assert_eq!(Model::load(&path).unwrap(), model);
    std::fs::remove_dir_all(&dir).unwrap();
    let err = Model::load(&dir.join("missing.safetensors")).unwrap_err();
    assert!(err.to_string().contains("missing.safetensors"), "{err}");
}

#[test]
fn component_lookups_name_what_is_wrong() {
    let model = sample();
    let err = model.mlp("repr").unwrap_err();
    assert!(matches!(
        err,
        ModelError::ComponentType {
            expected: "mlp",
            found: "lstm",
            ..
        }
    ));
    let err = model.lstm("head").unwrap_err();
    assert_eq!(
        err.to_string(),
        "model `edar-dqn` has no component `head` (it has: repr, core)"
    );
    let err = sample()
        .with("core", Component::Mlp(mlp(&[2, 2])))
        .unwrap_err();
    assert!(matches!(err, ModelError::DuplicateComponent { .. }));
    assert!(matches!(
        sample().with("Core.x", Component::Mlp(mlp(&[2, 2]))),
        Err(ModelError::BadName { .. })
    ));
    assert!(Model::new("", Provenance::default()).is_err());
}

/// Writes a file from raw parts, bypassing `Model`'s checks.
fn raw(meta: &[(&str, &str)], tensors: &[(&str, Dtype, Vec<usize>)]) -> Vec<u8> {
    let data: Vec<(String, Dtype, Vec<usize>, Vec<u8>)> = tensors
        .iter()
        .map(|(name, dtype, shape)| {
            let n: usize = shape.iter().product();
            let bytes = vec![0u8; n * dtype.bitsize() / 8];
            (name.to_string(), *dtype, shape.clone(), bytes)
        })
        .collect();
    let views: Vec<(&str, TensorView<'_>)> = data
        .iter()
        .map(|(n, d, s, b)| (n.as_str(), TensorView::new(*d, s.clone(), b).unwrap()))
        .collect();
    let meta: HashMap<String, String> = meta
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
    safetensors::serialize(views, Some(meta)).unwrap()
}

const HEADER: [(&str, &str); 6] = [
    ("format", "braid-model"),
    ("version", "1"),
    ("kind", "falcon-dqn"),
    ("provenance.producer", "test"),
    ("provenance.created_unix_s", "0"),
    ("provenance.source", "test"),
];

fn header_with(extra: &[(&'static str, &'static str)]) -> Vec<(&'static str, &'static str)> {
    let mut meta: Vec<_> = HEADER
        .iter()
        .filter(|(k, _)| !extra.iter().any(|(e, _)| e == k))
        .copied()
        .collect();
    meta.extend(extra.iter().filter(|(_, v)| !v.is_empty()).copied());
    meta
}

fn decode_error(meta: &[(&str, &str)], tensors: &[(&str, Dtype, Vec<usize>)]) -> String {
    Model::from_bytes(&raw(meta, tensors))
        .unwrap_err()
        .to_string()
}

#[test]
fn good_raw_file_decodes() {
    let meta = header_with(&[
        ("components", "q:mlp"),
        ("q.widths", "4,3"),
        ("q.activation", "relu"),
    ]);
    let tensors = [
        ("q.0.weight", Dtype::F32, vec![3, 4]),
        ("q.0.bias", Dtype::F32, vec![3]),
    ];
    let model = Model::from_bytes(&raw(&meta, &tensors)).unwrap();
    assert_eq!(model.mlp("q").unwrap().outputs(), 3);
}

#[test]
fn bad_headers_are_named() {
    let mlp_fields = [
        ("components", "q:mlp"),
        ("q.widths", "4,3"),
        ("q.activation", "relu"),
    ];
    let tensors = [
        ("q.0.weight", Dtype::F32, vec![3, 4]),
        ("q.0.bias", Dtype::F32, vec![3]),
    ];
    let cases: &[(&[(&str, &str)], &str)] = &[
        (&[("format", "")], "header field `format` is missing"),
        (&[("format", "onnx")], "header field `format` = \"onnx\""),
        (&[("version", "2")], "header field `version` = \"2\""),
        (&[("kind", "")], "header field `kind` is missing"),
        (
            &[("kind", "Bad Kind")],
            "header field `kind` = \"Bad Kind\"",
        ),
        (
            &[("provenance.source", "")],
            "`provenance.source` is missing",
        ),
        (
            &[("provenance.created_unix_s", "yesterday")],
            "`provenance.created_unix_s`",
        ),
        (
            &[("components", "q:cnn")],
            "header field `components` = \"q:cnn\"",
        ),
        (&[("q.widths", "4")], "header field `q.widths` = \"4\""),
        (&[("q.widths", "4,0")], "header field `q.widths` = \"4,0\""),
        (
            &[("q.activation", "gelu")],
            "header field `q.activation` = \"gelu\"",
        ),
    ];
    for (overrides, expected) in cases {
        let mut fields: Vec<(&str, &str)> = mlp_fields
            .iter()
            .filter(|(k, _)| !overrides.iter().any(|(o, _)| o == k))
            .copied()
            .collect();
        fields.extend(overrides.iter().copied());
        let mut meta: Vec<(&str, &str)> = HEADER
            .iter()
            .filter(|(k, _)| !fields.iter().any(|(o, _)| o == k))
            .copied()
            .collect();
        meta.extend(fields.iter().filter(|(_, v)| !v.is_empty()).copied());
        let err = decode_error(&meta, &tensors);
        assert!(err.contains(expected), "{overrides:?}: got `{err}`");
    }
}

#[test]
fn bad_tensors_are_named() {
    let meta = header_with(&[
        ("components", "q:mlp,r:lstm"),
        ("q.widths", "4,3"),
        ("q.activation", "relu"),
        ("r.input_size", "2"),
        ("r.hidden_size", "1"),
    ]);
    let good_q = [
        ("q.0.weight", Dtype::F32, vec![3, 4]),
        ("q.0.bias", Dtype::F32, vec![3]),
    ];
    let good_r = [
        ("r.weight_ih", Dtype::F32, vec![4, 2]),
        ("r.weight_hh", Dtype::F32, vec![4, 1]),
        ("r.bias_ih", Dtype::F32, vec![4]),
        ("r.bias_hh", Dtype::F32, vec![4]),
    ];
    let all: Vec<_> = good_q.iter().chain(&good_r).cloned().collect();
    assert!(Model::from_bytes(&raw(&meta, &all)).is_ok());

    let mut missing = all.clone();
    missing.retain(|(n, _, _)| *n != "r.bias_hh");
    assert_eq!(
        decode_error(&meta, &missing),
        "tensor `r.bias_hh` is missing"
    );

    let mut wrong_shape = all.clone();
    wrong_shape[0].2 = vec![4, 3];
    assert_eq!(
        decode_error(&meta, &wrong_shape),
        "tensor `q.0.weight` has shape [4, 3], expected [3, 4]"
    );

    let mut wrong_dtype = all.clone();
    wrong_dtype[2].1 = Dtype::F64;
    assert_eq!(
        decode_error(&meta, &wrong_dtype),
        "tensor `r.weight_ih` has dtype F64, expected F32"
    );

    let mut extra = all.clone();
    extra.push(("q.1.weight", Dtype::F32, vec![1]));
    assert_eq!(
        decode_error(&meta, &extra),
        "tensor `q.1.weight` belongs to no component"
    );
}

#[test]
fn non_finite_weights_and_garbage_are_refused() {
    let mut model_bytes = Model::new("falcon-dqn", Provenance::new(0, "t"))
        .unwrap()
        .with("q", Component::Mlp(mlp(&[2, 1])))
        .unwrap()
        .to_bytes()
        .unwrap();
    // Overwrite the last weight value (the bias, last in the data section) with NaN.
    let n = model_bytes.len();
    model_bytes[n - 4..].copy_from_slice(&f32::NAN.to_le_bytes());
    let err = Model::from_bytes(&model_bytes).unwrap_err().to_string();
    assert!(
        err.starts_with("component `q`:") && err.contains("not finite"),
        "{err}"
    );

    for garbage in [&b""[..], b"12345678", &[0xff; 64]] {
        let err = Model::from_bytes(garbage).unwrap_err();
        assert!(matches!(err, ModelError::Container(_)), "{err}");
    }
}
