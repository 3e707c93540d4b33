fn main() -> Result<(), Box<dyn std::error::Error>> {
    // talos-sim serves the same subset of Talos' machine API that the provider
    // calls; the client half is generated too so tests can call it like the
    // provider does.
    tonic_prost_build::configure()
        .build_server(true)
        .build_client(true)
        .compile_protos(&["../proto/talos/machine/machine.proto"], &["../proto"])?;
    Ok(())
}
