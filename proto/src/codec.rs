//! The codec of Accord's services: protobuf through prost, as tonic's default, with smaller
//! first buffers.
//!
//! tonic gives every stream an 8 KiB encode buffer and an 8 KiB decode buffer when it
//! opens. A Sync stream lives as long as its agent and almost every message on it is a
//! heartbeat of a few bytes, so at 10,000 agents those buffers were 160 MiB of a hub's
//! memory holding nothing. Here they start at [`FIRST_BUFFER_BYTES`] and grow (as tonic's
//! do past 8 KiB) for the rare large message, such as a full set of assignments.

use std::marker::PhantomData;

use tonic::codec::BufferSettings;
use tonic_prost::{ProstDecoder, ProstEncoder};

/// Capacity a stream's encode and decode buffers start with.
pub const FIRST_BUFFER_BYTES: usize = 512;
/// Bytes encoded before a streaming response yields to the runtime (tonic's default).
const YIELD_THRESHOLD: usize = 32 * 1024;

/// [`tonic_prost::ProstCodec`] with [`FIRST_BUFFER_BYTES`] buffers.
#[derive(Debug, Clone)]
pub struct Codec<T, U> {
    _pd: PhantomData<(T, U)>,
}

impl<T, U> Default for Codec<T, U> {
    fn default() -> Self {
        Self { _pd: PhantomData }
    }
}

fn settings() -> BufferSettings {
    BufferSettings::new(FIRST_BUFFER_BYTES, YIELD_THRESHOLD)
}

impl<T, U> tonic::codec::Codec for Codec<T, U>
where
    T: prost::Message + Send + 'static,
    U: prost::Message + Default + Send + 'static,
{
    type Encode = T;
    type Decode = U;
    type Encoder = ProstEncoder<T>;
    type Decoder = ProstDecoder<U>;

    fn encoder(&mut self) -> Self::Encoder {
        ProstEncoder::new(settings())
    }

    fn decoder(&mut self) -> Self::Decoder {
        ProstDecoder::new(settings())
    }
}
