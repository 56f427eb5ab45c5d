#!/usr/bin/env bash
# The release of VERSION, reproducibly: `make release` runs this with the build's variables (GO,
# LDFLAGS, VERSION, REVISION, SOURCE_DATE_EPOCH, DIST, NFPM) and writes into $DIST:
#   stall_exporter-<version>.linux-<arch>.tar.gz   binary, LICENSE, README, CHANGELOG, the systemd unit,
#                                                  its /etc/default file, the dns and writeback drop-ins
#   stall-exporter_<version>-1_<arch>.deb, stall-exporter-<version>-1.<x86_64|aarch64>.rpm
#                                                  (deploy/packages/nfpm.yaml)
#   stall_exporter-<version>.oci.tar               the linux/amd64 + linux/arm64 image index (Dockerfile)
#   stall-exporter-<chart version>.tgz             the Helm chart (deploy/helm/stall-exporter), as
#                                                  helm package writes it (tools/chartpackage)
#   sha256sums.txt                                 over all of the above
# for linux/amd64 and linux/arm64. Nothing depends on the machine, the user, the time or the
# checkout's path: binaries are built with -trimpath and an empty build ID, and every time stamp
# (the binary's build date, archive and package entries, image layers and config) is
# SOURCE_DATE_EPOCH, the commit's time. Two runs on one commit give byte-identical files
# (tools/e2e/release_test.go checks it). Intermediate files go to .build/, which the Dockerfile
# copies from.
set -euo pipefail
cd "$(dirname "$0")/.."
: "${GO:?}" "${LDFLAGS:?}" "${VERSION:?}" "${REVISION:?}" "${SOURCE_DATE_EPOCH:?}" "${DIST:?}" "${NFPM:?}"
export SOURCE_DATE_EPOCH TZ=UTC LC_ALL=C
umask 022
ARCHES=(amd64 arm64)
BUILD=.build

rm -rf "$BUILD"
mkdir -p "$BUILD" "$DIST"
# Only this script's files: DIST may be a directory holding others.
rm -f "$DIST"/stall_exporter-* "$DIST"/stall-exporter[_-]* "$DIST/sha256sums.txt"
DIST=$(cd "$DIST" && pwd)

# Binaries, cross-compiled (CGO_ENABLED=0 needs no C toolchain for arm64).
for arch in "${ARCHES[@]}"; do
  CGO_ENABLED=0 GOOS=linux GOARCH=$arch "$GO" build -trimpath -buildvcs=false -ldflags "$LDFLAGS" \
    -o "$BUILD/linux-$arch/stall_exporter" .
done

# Archives: sorted entries, owner 0, one mtime, no gzip name or time.
for arch in "${ARCHES[@]}"; do
  name=stall_exporter-$VERSION.linux-$arch
  install -d -m 0755 "$BUILD/$name"
  install -m 0755 "$BUILD/linux-$arch/stall_exporter" "$BUILD/$name/"
  install -m 0644 LICENSE README.md CHANGELOG.md deploy/systemd/stall_exporter.service \
    deploy/systemd/stall_exporter.default deploy/systemd/stall_exporter-dns.conf \
    deploy/systemd/stall_exporter-writeback.conf "$BUILD/$name/"
  tar --sort=name --mtime="@$SOURCE_DATE_EPOCH" --owner=0 --group=0 --numeric-owner --format=gnu \
    -C "$BUILD" -cf - "$name" | gzip -n -9 >"$DIST/$name.tar.gz"
done

# Packages. The unit and the dns and writeback drop-ins are deploy/systemd's, with ExecStart
# pointing at the packaged binary; the Redis password file the unit's LoadCredential= needs is
# shipped empty.
install -d -m 0755 "$BUILD/package"
for f in stall_exporter.service stall_exporter-dns.conf stall_exporter-writeback.conf; do
  sed '/^ExecStart=/s|/usr/local/bin/stall_exporter|/usr/bin/stall_exporter|' "deploy/systemd/$f" >"$BUILD/package/$f"
done
install -m 0600 /dev/null "$BUILD/package/redis-password"
for arch in "${ARCHES[@]}"; do
  for packager in deb rpm; do
    BUILD=$BUILD ARCH=$arch VERSION=$VERSION $NFPM package --config deploy/packages/nfpm.yaml \
      --packager "$packager" --target "$DIST/" >/dev/null
  done
done

# Image: FROM scratch, the binaries above, a root file system of CA certificates (the build
# host's, for rediss:// targets), passwd/group naming the nonroot user and a /tmp. buildah keeps
# its storage under .build, so nothing is left in the host's image store.
rootfs=$BUILD/rootfs
install -d -m 0755 "$rootfs/etc/ssl/certs"
install -d -m 1777 "$rootfs/tmp"
install -m 0644 /etc/ssl/certs/ca-certificates.crt "$rootfs/etc/ssl/certs/"
printf 'root:x:0:0:root:/root:/sbin/nologin\nnonroot:x:65532:65532:nonroot:/home/nonroot:/sbin/nologin\n' >"$rootfs/etc/passwd"
printf 'root:x:0:\nnonroot:x:65532:\n' >"$rootfs/etc/group"
install -m 0644 LICENSE "$rootfs/"
buildah() { command buildah --root "$PWD/$BUILD/containers" --runroot "$PWD/$BUILD/containers-run" --storage-driver vfs "$@"; }
image=localhost/stall_exporter:$VERSION
buildah manifest create "$image" >/dev/null
for arch in "${ARCHES[@]}"; do
  buildah build --quiet --platform "linux/$arch" --timestamp "$SOURCE_DATE_EPOCH" --manifest "$image" \
    --build-arg VERSION="$VERSION" --build-arg REVISION="$REVISION" \
    --build-arg CREATED="$(date -u -d "@$SOURCE_DATE_EPOCH" +%Y-%m-%dT%H:%M:%SZ)" . >/dev/null
done
# Its blobs are reproducible; buildah's oci-archive: would stamp the tar around them with the
# clock, so the OCI layout is written to a directory and archived like the release archives.
buildah manifest push --quiet --all "$image" "oci:$BUILD/oci:$VERSION"
buildah rmi --all >/dev/null
tar --sort=name --mtime="@$SOURCE_DATE_EPOCH" --owner=0 --group=0 --numeric-owner --format=gnu \
  -C "$BUILD/oci" -cf "$DIST/stall_exporter-$VERSION.oci.tar" oci-layout index.json blobs

# The Helm chart, by helm's own packager from the tools module (no helm binary), its entries
# stamped with SOURCE_DATE_EPOCH; its symbolic links to alerts/ and dashboards/ are followed.
"$GO" -C tools run ./chartpackage "$PWD/deploy/helm/stall-exporter" "$DIST" >/dev/null

(cd "$DIST" && sha256sum -- * >sha256sums.txt)
ls -l "$DIST"
