//! Generates the accord.v1 messages and tonic services at build time from `accord/v1/*.proto`.

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let protos = ["accord/v1/registration.proto", "accord/v1/sync.proto"];
    for p in &protos {
        println!("cargo:rerun-if-changed={p}");
    }
    tonic_prost_build::configure()
        .build_client(true)
        .build_server(true)
        // Small first buffers for long-lived streams (see src/codec.rs).
        .codec_path("crate::codec::Codec")
        .compile_protos(&protos, &["."])?;
    Ok(())
}
