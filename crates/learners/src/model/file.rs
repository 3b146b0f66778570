//! Encoding and decoding of `braid-model` version 1 files (layout in `docs/models.md`).

use std::collections::{BTreeSet, HashMap};

use braid_sched_core::nn::{Activation, Linear, Lstm, MAX_DIMENSION, Mlp};
use safetensors::tensor::{Dtype, SafeTensors, TensorView};

use super::{Component, FORMAT, FORMAT_VERSION, Model, ModelError, Provenance, is_valid_name};

/// One tensor to write: name, shape, little-endian f32 bytes.
struct OwnedTensor {
    name: String,
    shape: Vec<usize>,
    bytes: Vec<u8>,
}

impl OwnedTensor {
    fn new(name: String, shape: Vec<usize>, values: &[f32]) -> Self {
        let bytes = values.iter().flat_map(|v| v.to_le_bytes()).collect();
        OwnedTensor { name, shape, bytes }
    }
}

pub(super) fn encode(model: &Model) -> Result<Vec<u8>, ModelError> {
    let mut meta = HashMap::new();
    meta.insert("format".to_owned(), FORMAT.to_owned());
    meta.insert("version".to_owned(), FORMAT_VERSION.to_string());
    meta.insert("kind".to_owned(), model.kind.clone());
    let list: Vec<String> = model
        .components
        .iter()
        .map(|(name, c)| format!("{name}:{}", c.type_name()))
        .collect();
    meta.insert("components".to_owned(), list.join(","));
    let p = &model.provenance;
    meta.insert("provenance.producer".to_owned(), p.producer.clone());
    meta.insert(
        "provenance.created_unix_s".to_owned(),
        p.created_unix_s.to_string(),
    );
    meta.insert("provenance.source".to_owned(), p.source.clone());
    for (key, value) in &p.extra {
        meta.insert(format!("provenance.{key}"), value.clone());
    }
    let mut tensors = Vec::new();
    for (name, component) in &model.components {
        match component {
            Component::Mlp(mlp) => encode_mlp(name, mlp, &mut meta, &mut tensors),
            Component::Lstm(lstm) => encode_lstm(name, lstm, &mut meta, &mut tensors),
        }
    }
    let views = tensors
        .iter()
        .map(|t| {
            TensorView::new(Dtype::F32, t.shape.clone(), &t.bytes).map(|v| (t.name.as_str(), v))
        })
        .collect::<Result<Vec<_>, _>>()
        .map_err(ModelError::Container)?;
    safetensors::serialize(views, Some(meta)).map_err(ModelError::Container)
}

fn encode_mlp(
    name: &str,
    mlp: &Mlp,
    meta: &mut HashMap<String, String>,
    tensors: &mut Vec<OwnedTensor>,
) {
    let widths: Vec<String> = mlp.widths().map(|w| w.to_string()).collect();
    meta.insert(format!("{name}.widths"), widths.join(","));
    meta.insert(
        format!("{name}.activation"),
        mlp.hidden_activation().name().to_owned(),
    );
    for (i, layer) in mlp.layers().iter().enumerate() {
        tensors.push(OwnedTensor::new(
            format!("{name}.{i}.weight"),
            vec![layer.outputs(), layer.inputs()],
            layer.weight(),
        ));
        tensors.push(OwnedTensor::new(
            format!("{name}.{i}.bias"),
            vec![layer.outputs()],
            layer.bias(),
        ));
    }
}

fn encode_lstm(
    name: &str,
    lstm: &Lstm,
    meta: &mut HashMap<String, String>,
    tensors: &mut Vec<OwnedTensor>,
) {
    let (input, hidden) = (lstm.input_size(), lstm.hidden_size());
    meta.insert(format!("{name}.input_size"), input.to_string());
    meta.insert(format!("{name}.hidden_size"), hidden.to_string());
    let gates = 4 * hidden;
    tensors.push(OwnedTensor::new(
        format!("{name}.weight_ih"),
        vec![gates, input],
        lstm.weight_ih(),
    ));
    tensors.push(OwnedTensor::new(
        format!("{name}.weight_hh"),
        vec![gates, hidden],
        lstm.weight_hh(),
    ));
    tensors.push(OwnedTensor::new(
        format!("{name}.bias_ih"),
        vec![gates],
        lstm.bias_ih(),
    ));
    tensors.push(OwnedTensor::new(
        format!("{name}.bias_hh"),
        vec![gates],
        lstm.bias_hh(),
    ));
}

/// Header fields and tensors of a file being decoded, with the tensors claimed so far.
struct Reader<'a> {
    meta: HashMap<String, String>,
    tensors: SafeTensors<'a>,
    claimed: BTreeSet<String>,
}

impl Reader<'_> {
    fn field(&self, field: &str) -> Result<&str, ModelError> {
        self.meta
            .get(field)
            .map(String::as_str)
            .ok_or_else(|| ModelError::MissingField {
                field: field.to_owned(),
            })
    }

    fn size_field(&self, field: &str) -> Result<usize, ModelError> {
        let value = self.field(field)?;
        value
            .parse::<usize>()
            .ok()
            .filter(|v| (1..=MAX_DIMENSION).contains(v))
            .ok_or_else(|| ModelError::BadField {
                field: field.to_owned(),
                value: value.to_owned(),
                expected: "an integer in 1..=65536",
            })
    }

    /// The f32 values of tensor `name`, which must have exactly `shape`.
    fn tensor(&mut self, name: String, shape: &[usize]) -> Result<Vec<f32>, ModelError> {
        let view = self
            .tensors
            .tensor(&name)
            .map_err(|_| ModelError::MissingTensor {
                tensor: name.clone(),
            })?;
        if view.dtype() != Dtype::F32 {
            return Err(ModelError::TensorDtype {
                tensor: name,
                found: format!("{:?}", view.dtype()),
            });
        }
        if view.shape() != shape {
            return Err(ModelError::TensorShape {
                tensor: name,
                expected: shape.to_vec(),
                found: view.shape().to_vec(),
            });
        }
        let values = view
            .data()
            .chunks_exact(4)
            .map(|b| f32::from_le_bytes([b[0], b[1], b[2], b[3]]))
            .collect();
        self.claimed.insert(name);
        Ok(values)
    }

    fn mlp(&mut self, name: &str) -> Result<Mlp, ModelError> {
        let field = format!("{name}.widths");
        let text = self.field(&field)?.to_owned();
        let bad = || ModelError::BadField {
            field: field.clone(),
            value: text.clone(),
            expected: "at least two comma-separated integers in 1..=65536",
        };
        let widths = text
            .split(',')
            .map(|w| {
                w.trim()
                    .parse::<usize>()
                    .ok()
                    .filter(|w| (1..=MAX_DIMENSION).contains(w))
            })
            .collect::<Option<Vec<_>>>()
            .filter(|w| w.len() >= 2)
            .ok_or_else(bad)?;
        let field = format!("{name}.activation");
        let text = self.field(&field)?;
        let activation = Activation::from_name(text).ok_or_else(|| ModelError::BadField {
            field: field.clone(),
            value: text.to_owned(),
            expected: "relu, tanh or identity",
        })?;
        let mut layers = Vec::with_capacity(widths.len() - 1);
        for (i, pair) in widths.windows(2).enumerate() {
            let (inputs, outputs) = (pair[0], pair[1]);
            let network = |source| ModelError::Network {
                component: name.to_owned(),
                source,
            };
            let weight = self.tensor(format!("{name}.{i}.weight"), &[outputs, inputs])?;
            let bias = self.tensor(format!("{name}.{i}.bias"), &[outputs])?;
            layers.push(
                Linear::new(&format!("layer {i}"), inputs, outputs, weight, bias)
                    .map_err(network)?,
            );
        }
        Mlp::new(layers, activation).map_err(|source| ModelError::Network {
            component: name.to_owned(),
            source,
        })
    }

    fn lstm(&mut self, name: &str) -> Result<Lstm, ModelError> {
        let input = self.size_field(&format!("{name}.input_size"))?;
        let hidden = self.size_field(&format!("{name}.hidden_size"))?;
        let gates = 4 * hidden;
        let weight_ih = self.tensor(format!("{name}.weight_ih"), &[gates, input])?;
        let weight_hh = self.tensor(format!("{name}.weight_hh"), &[gates, hidden])?;
        let bias_ih = self.tensor(format!("{name}.bias_ih"), &[gates])?;
        let bias_hh = self.tensor(format!("{name}.bias_hh"), &[gates])?;
        Lstm::new(input, hidden, &weight_ih, &weight_hh, &bias_ih, &bias_hh).map_err(|source| {
            ModelError::Network {
                component: name.to_owned(),
                source,
            }
        })
    }

    fn provenance(&self) -> Result<Provenance, ModelError> {
        let field = "provenance.created_unix_s";
        let created = self.field(field)?;
        let created_unix_s = created.parse().map_err(|_| ModelError::BadField {
            field: field.to_owned(),
            value: created.to_owned(),
            expected: "seconds since the Unix epoch (an unsigned integer)",
        })?;
        let known = ["producer", "created_unix_s", "source"];
        let extra = self
            .meta
            .iter()
            .filter_map(|(k, v)| Some((k.strip_prefix("provenance.")?, v)))
            .filter(|(k, _)| !known.contains(k))
            .map(|(k, v)| (k.to_owned(), v.clone()))
            .collect();
        Ok(Provenance {
            producer: self.field("provenance.producer")?.to_owned(),
            created_unix_s,
            source: self.field("provenance.source")?.to_owned(),
            extra,
        })
    }
}

pub(super) fn decode(bytes: &[u8]) -> Result<Model, ModelError> {
    let (_, header) = SafeTensors::read_metadata(bytes).map_err(ModelError::Container)?;
    let tensors = SafeTensors::deserialize(bytes).map_err(ModelError::Container)?;
    let mut reader = Reader {
        meta: header.metadata().clone().unwrap_or_default(),
        tensors,
        claimed: BTreeSet::new(),
    };
    let format = reader.field("format")?;
    if format != FORMAT {
        return Err(ModelError::BadField {
            field: "format".to_owned(),
            value: format.to_owned(),
            expected: "braid-model",
        });
    }
    let version = reader.field("version")?;
    if version != FORMAT_VERSION.to_string() {
        return Err(ModelError::BadField {
            field: "version".to_owned(),
            value: version.to_owned(),
            expected: "1 (the version this build reads)",
        });
    }
    let kind = reader.field("kind")?.to_owned();
    let mut model = Model::new(kind, reader.provenance()?)?;
    let list = reader.field("components")?.to_owned();
    for entry in list.split(',').filter(|e| !e.is_empty()) {
        let (name, type_name) = entry.split_once(':').unwrap_or((entry, ""));
        if !is_valid_name(name) {
            return Err(ModelError::BadName {
                name: name.to_owned(),
            });
        }
        let component = match type_name {
            "mlp" => Component::Mlp(reader.mlp(name)?),
            "lstm" => Component::Lstm(reader.lstm(name)?),
            _ => {
                return Err(ModelError::BadField {
                    field: "components".to_owned(),
                    value: entry.to_owned(),
                    expected: "name:mlp or name:lstm entries, comma-separated",
                });
            }
        };
        model = model.with(name, component)?;
    }
    if let Some((name, _)) = reader
        .tensors
        .iter()
        .find(|(name, _)| !reader.claimed.contains(*name))
    {
        return Err(ModelError::UnexpectedTensor {
            tensor: name.to_owned(),
        });
    }
    Ok(model)
}
