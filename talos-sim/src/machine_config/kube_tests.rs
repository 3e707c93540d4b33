use super::*;

#[test]
fn the_install_disk_is_read_from_a_dev_path_selector() {
    assert_eq!(
        dev_path_of(r#"disk.dev_path == "/dev/sda""#).as_deref(),
        Some("/dev/sda")
    );
    assert_eq!(
        dev_path_of(r#""/dev/nvme0n1"==disk.dev_path"#).as_deref(),
        Some("/dev/nvme0n1")
    );
    assert_eq!(dev_path_of("disk.size > 10u * GB"), None);
    assert_eq!(dev_path_of(r#"disk.model == "x""#), None);
}
