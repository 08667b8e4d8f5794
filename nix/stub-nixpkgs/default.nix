# A stand-in for nixpkgs, used only by eval-outputs.nix to evaluate flake.nix's outputs on a
# machine that cannot fetch nixpkgs. Every function records its arguments, so the check can
# assert what the flake asks for (toolchain file, lock file, image contents) without building.
{ system, overlays ? [ ] }:
let
  stubLib = import ./lib.nix;
  drv = name: attrs: attrs // { type = "derivation"; inherit name; outPath = "/nix/store/stub-${name}"; };
  base = {
    inherit system;
    lib = stubLib;
    iproute2 = drv "iproute2" { };
    strace = drv "strace" { };
    busybox = drv "busybox" { };
    cargo-nextest = drv "cargo-nextest" { };
    docker-client = drv "docker-client" { };
    docker-compose = drv "docker-compose" { };
    nixpkgs-fmt = drv "nixpkgs-fmt" { };
    mkShell = args: drv "shell" { shellArgs = args; };
    makeRustPlatform = { cargo, rustc }: {
      buildRustPackage = args: drv args.pname (args // {
        overrideAttrs = f: drv "${args.pname}-override" (args // f args);
        toolchain = rustc;
      });
    };
    dockerTools.buildLayeredImage = args: drv "image-${args.name}" { imageArgs = args; };
  };
  # Apply overlays the way nixpkgs does (final, prev), with `final` = the result.
  applied = builtins.foldl' (acc: ov: acc // ov result acc) base overlays;
  result = applied;
in
result
