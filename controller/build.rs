fn main() -> Result<(), Box<dyn std::error::Error>> {
    // The provider serves the CloudProvider contract and is a client of Talos'
    // maintenance API; both protos live at the top of the repository.
    tonic_prost_build::configure()
        .build_client(true)
        .build_server(true)
        .compile_protos(
            &[
                "../proto/karpenter/cloudprovider/v1/cloudprovider.proto",
                "../proto/talos/machine/machine.proto",
            ],
            &["../proto"],
        )?;
    Ok(())
}
