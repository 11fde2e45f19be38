// Package images is cri-compose's image store on the Docker Engine: image
// references as CRI requests give them and as kubelet expects them back,
// registry mirrors, pulls through them, lookups, and the files of images
// (their users and groups, and copies for image volumes), which Engine API
// 1.41 only shows through a container. The CRI ImageService handlers in
// package cri are thin calls into it.
package images
