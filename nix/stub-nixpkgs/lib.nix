# The few nixpkgs.lib functions flake.nix uses, with the same behaviour for plain values.
rec {
  genAttrs = names: f: builtins.listToAttrs (map (n: { name = n; value = f n; }) names);
  fileset = {
    unions = paths: paths;
    toSource = { root, fileset }:
      assert builtins.all builtins.pathExists fileset;
      { outPath = root; filesetPaths = fileset; };
  };
  licenses = { mit = "MIT"; asl20 = "Apache-2.0"; };
  platforms.linux = [ "x86_64-linux" "aarch64-linux" ];
}
