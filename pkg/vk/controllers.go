package vk

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"net/http"
	"path"
	"time"

	"github.com/virtual-kubelet/virtual-kubelet/node"
	"github.com/virtual-kubelet/virtual-kubelet/node/nodeutil"
	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/scheme"
	typedcorev1 "k8s.io/client-go/kubernetes/typed/core/v1"
	corev1listers "k8s.io/client-go/listers/core/v1"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/record"
	"k8s.io/klog/v2"
)

// Controllers are virtual-kubelet's node and pod controllers, wired as
// nodeutil.NewNode wires them but reading only what a kubelet may read
// under the Node authorizer: its own pods (field selector spec.nodeName),
// its own Node and Lease, and services (cluster-wide, for the service
// link variables, as kubelet). nodeutil.NewNode also starts cluster-wide
// configMap and secret informers, which the Node authorizer refuses; here
// the pod controller gets informers of a factory that is never started
// (it reads them only to resolve env, which vk-cri does itself), and the
// provider watches the configMaps and secrets its pods reference one by
// one (volumes_watch.go).
type Controllers struct {
	// Pods lists the node's pods; Services all services.
	Pods     corev1listers.PodLister
	Services corev1listers.ServiceLister
	// Node is the Node to register: ConfigureNode fills it before Run.
	Node *v1.Node

	client   kubernetes.Interface
	pods     informers.SharedInformerFactory
	services informers.SharedInformerFactory
	unused   informers.SharedInformerFactory // never started
	ready    chan struct{}
}

// ServeConfig is the kubelet API's listener.
type ServeConfig struct {
	Addr    string
	TLS     *tls.Config
	Handler http.Handler
	// Workers is the number of pod controller workers.
	Workers int
}

// informerResync is nodeutil's default.
const informerResync = time.Minute

// NewControllers prepares the controllers of node nodeName; Run starts
// them.
func NewControllers(client kubernetes.Interface, nodeName string) *Controllers {
	c := &Controllers{
		client:   client,
		pods:     informers.NewSharedInformerFactoryWithOptions(client, informerResync, nodeutil.PodInformerFilter(nodeName)),
		services: informers.NewSharedInformerFactory(client, informerResync),
		unused:   informers.NewSharedInformerFactory(client, informerResync),
		ready:    make(chan struct{}),
		Node: &v1.Node{
			ObjectMeta: metav1.ObjectMeta{Name: nodeName},
			Status: v1.NodeStatus{Phase: v1.NodePending, Conditions: []v1.NodeCondition{
				{Type: v1.NodeReady}, {Type: v1.NodeDiskPressure}, {Type: v1.NodeMemoryPressure},
				{Type: v1.NodePIDPressure}, {Type: v1.NodeNetworkUnavailable},
			}},
		},
	}
	c.Pods = c.pods.Core().V1().Pods().Lister()
	c.Services = c.services.Core().V1().Services().Lister()
	return c
}

// Ready is closed once the node is registered and the pod controller
// runs.
func (c *Controllers) Ready() <-chan struct{} { return c.ready }

// Run serves the kubelet API and runs the controllers for p until ctx
// ends or a controller fails.
func (c *Controllers) Run(ctx context.Context, p *Provider, s ServeConfig) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()

	nc, err := node.NewNodeController(p, c.Node, c.client.CoreV1().Nodes(),
		node.WithNodeEnableLeaseV1(nodeutil.NodeLeaseV1Client(c.client), node.DefaultLeaseDuration))
	if err != nil {
		return fmt.Errorf("node controller: %w", err)
	}
	eb := record.NewBroadcaster()
	defer eb.Shutdown()
	eb.StartStructuredLogging(4)
	eb.StartRecordingToSink(&typedcorev1.EventSinkImpl{Interface: c.client.CoreV1().Events(v1.NamespaceAll)})
	pc, err := node.NewPodController(node.PodControllerConfig{
		PodClient:     c.client.CoreV1(),
		EventRecorder: eb.NewRecorder(scheme.Scheme, v1.EventSource{Component: path.Join(c.Node.Name, "pod-controller")}),
		Provider:      p,
		PodInformer:   c.pods.Core().V1().Pods(),
		// Required, and read only to resolve env, which vk-cri does
		// itself (SkipDownwardAPIResolution): never started.
		ConfigMapInformer:         c.unused.Core().V1().ConfigMaps(),
		SecretInformer:            c.unused.Core().V1().Secrets(),
		ServiceInformer:           c.services.Core().V1().Services(),
		SkipDownwardAPIResolution: true,
	})
	if err != nil {
		return fmt.Errorf("pod controller: %w", err)
	}

	l, err := tls.Listen("tcp", s.Addr, s.TLS)
	if err != nil {
		return fmt.Errorf("kubelet API: %w", err)
	}
	srv := &http.Server{Handler: s.Handler, TLSConfig: s.TLS, ReadHeaderTimeout: 30 * time.Second}
	go func() {
		if err := srv.Serve(l); err != nil && !errors.Is(err, http.ErrServerClosed) && !errors.Is(err, net.ErrClosed) {
			klog.ErrorS(err, "Serving the kubelet API")
		}
	}()
	defer func() { _ = srv.Close() }()

	// The pod controller passes on spec changes only; a readiness gate's
	// condition, set by a controller, changes the status alone. A pod
	// gone from the API server ends what vk-cri kept of it once finished.
	if _, err := c.pods.Core().V1().Pods().Informer().AddEventHandler(cache.ResourceEventHandlerFuncs{
		UpdateFunc: func(_, obj any) {
			if pod, ok := obj.(*v1.Pod); ok {
				p.PodStatusSeen(pod)
			}
		},
		DeleteFunc: func(obj any) {
			if d, ok := obj.(cache.DeletedFinalStateUnknown); ok {
				obj = d.Obj
			}
			if pod, ok := obj.(*v1.Pod); ok {
				p.PodGone(pod)
			}
		},
	}); err != nil {
		return fmt.Errorf("pod informer: %w", err)
	}
	c.pods.Start(ctx.Done())
	c.services.Start(ctx.Done())
	defer c.pods.Shutdown()
	defer c.services.Shutdown()

	go func() { _ = pc.Run(ctx, s.Workers) }()
	defer func() { cancel(); <-pc.Done() }()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-pc.Ready():
	case <-pc.Done():
		return pc.Err()
	}
	go func() { _ = nc.Run(ctx) }()
	defer func() { cancel(); <-nc.Done() }()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-nc.Ready():
	case <-nc.Done():
		return nc.Err()
	}
	close(c.ready)
	select {
	case <-nc.Done():
		return nc.Err()
	case <-pc.Done():
		return pc.Err()
	}
}
