#![forbid(unsafe_code)]

fn main() {
    println!("karpenter-scaleway: wiring lands with the CloudProvider service");
}
