# Stand-in for oxalica/rust-overlay: rust-bin.fromRustupToolchainFile reads the real
# rust-toolchain.toml, so the check sees the channel the flake will pin.
{
  overlays.default = final: prev: {
    rust-bin.fromRustupToolchainFile = file:
      let t = (builtins.fromTOML (builtins.readFile file)).toolchain; in {
        type = "derivation";
        name = "rust-${t.channel}";
        outPath = "/nix/store/stub-rust-${t.channel}";
        channel = t.channel;
        components = t.components or [ ];
      };
  };
}
