// xferlab's dumbbell in ns-3: an independent reference for the built-in simulator.
//
//   dumbbell --config=resolved.json --out=result.json
//
// The configuration is the dict `xferlab.scenario.resolve()` returns (rates in bit/s, times
// in s, the buffer in packets, one entry per flow), written to a file by
// benches/ns3_compare.py. The result is one JSON document: per-flow bytes and counters,
// receiver-side bytes per goodput interval, the bottleneck's bytes, drops and queue per
// link interval, every bottleneck drop (time, flow, sequence number), sender samples (cwnd,
// ssthresh, srtt, RTO, in flight) per TCP interval, and each flow's changes of congestion
// state and ssthresh. benches/ns3/build.sh builds and runs it.
//
// The network, and where it differs from xferlab's simulator on purpose:
//
//   sender_k --(Ca_k, RTT_k/2)-- left ==(C, 0, DropTail B packets)==> right --(100 C, 0)-- receiver_k
//
// * The whole propagation delay of pair k is on its access link (both directions), so each
//   pair has its own RTT; serialisation adds a little to it, as in xferlab.
// * The bottleneck is left's device queue: a DropTailQueue of B packets with no queue disc
//   in front of it (the default FqCoDel that ns-3's address helper installs is removed), so
//   B means B; the packet being serialised is not in the queue, as with a Linux pfifo.
//   Every other device has a queue far larger than any window: the bottleneck is the only
//   place where packets are lost.
// * Point-to-point links carry IP packets plus a 2-byte PPP header and no Ethernet framing:
//   a full link delivers C × MSS / (MTU + 2) of goodput, where xferlab's delivers
//   C × MSS / (MTU + 38). Each simulator is compared with its own ceiling.
// * TCP as Linux's defaults set it: SACK, timestamps, window scaling, PRR (ns-3's default
//   recovery), delayed ACKs every second segment with Linux's 40 ms minimum timer,
//   RTO ≥ rto_min, initial window from the scenario, and socket buffers never the limit.
//   ns-3's TCP has neither TCP Small Queues nor pacing (except TcpBbr, which turns pacing
//   on itself): a sender puts its window on its access link at once.

#include "ns3/applications-module.h"
#include "ns3/core-module.h"
#include "ns3/internet-module.h"
#include "ns3/network-module.h"
#include "ns3/point-to-point-module.h"
#include "ns3/traffic-control-module.h"

#include <chrono>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <map>
#include <memory>
#include <sstream>
#include <stdexcept>
#include <string>
#include <tuple>
#include <variant>
#include <vector>

#ifndef NS3_VERSION
#define NS3_VERSION "unknown"
#endif

using namespace ns3;

// ----------------------------------------------------------------------------- JSON input

/// A JSON value: just enough of RFC 8259 to read a resolved scenario.
struct Json
{
    using Array = std::vector<Json>;
    using Object = std::map<std::string, Json>;
    std::variant<std::nullptr_t, bool, double, std::string, Array, Object> v;

    bool IsNull() const
    {
        return std::holds_alternative<std::nullptr_t>(v);
    }

    const Json& operator[](const std::string& key) const
    {
        static const Json null{nullptr};
        const auto& o = std::get<Object>(v);
        auto it = o.find(key);
        return it == o.end() ? null : it->second;
    }

    double Num() const
    {
        return std::get<double>(v);
    }

    double NumOr(double fallback) const
    {
        return IsNull() ? fallback : Num();
    }

    bool Bool() const
    {
        return std::get<bool>(v);
    }

    const std::string& Str() const
    {
        return std::get<std::string>(v);
    }

    const Array& Arr() const
    {
        return std::get<Array>(v);
    }
};

class JsonReader
{
  public:
    explicit JsonReader(const std::string& text)
        : m_s(text)
    {
    }

    Json Document()
    {
        Json j = Value();
        Space();
        if (m_i != m_s.size())
        {
            Fail("trailing characters");
        }
        return j;
    }

  private:
    const std::string& m_s;
    size_t m_i{0};

    [[noreturn]] void Fail(const std::string& what) const
    {
        throw std::runtime_error("config JSON, offset " + std::to_string(m_i) + ": " + what);
    }

    void Space()
    {
        while (m_i < m_s.size() && std::isspace(static_cast<unsigned char>(m_s[m_i])))
        {
            ++m_i;
        }
    }

    bool Eat(const char* word)
    {
        size_t n = std::char_traits<char>::length(word);
        if (m_s.compare(m_i, n, word) == 0)
        {
            m_i += n;
            return true;
        }
        return false;
    }

    std::string String()
    {
        std::string out;
        ++m_i; // opening quote
        while (m_i < m_s.size() && m_s[m_i] != '"')
        {
            char c = m_s[m_i++];
            if (c == '\\')
            {
                if (m_i >= m_s.size())
                {
                    Fail("unterminated escape");
                }
                char e = m_s[m_i++];
                switch (e)
                {
                case 'n':
                    out += '\n';
                    break;
                case 't':
                    out += '\t';
                    break;
                case 'u': // names and descriptions only: keep a placeholder
                    m_i += 4;
                    out += '?';
                    break;
                default:
                    out += e;
                }
            }
            else
            {
                out += c;
            }
        }
        if (m_i >= m_s.size())
        {
            Fail("unterminated string");
        }
        ++m_i;
        return out;
    }

    Json Value()
    {
        Space();
        if (m_i >= m_s.size())
        {
            Fail("unexpected end");
        }
        char c = m_s[m_i];
        if (c == '{')
        {
            ++m_i;
            Json::Object o;
            Space();
            if (m_s[m_i] == '}')
            {
                ++m_i;
                return Json{o};
            }
            while (true)
            {
                Space();
                if (m_s[m_i] != '"')
                {
                    Fail("expected a key");
                }
                std::string key = String();
                Space();
                if (m_s[m_i++] != ':')
                {
                    Fail("expected ':'");
                }
                o[key] = Value();
                Space();
                char d = m_s[m_i++];
                if (d == '}')
                {
                    return Json{o};
                }
                if (d != ',')
                {
                    Fail("expected ',' or '}'");
                }
            }
        }
        if (c == '[')
        {
            ++m_i;
            Json::Array a;
            Space();
            if (m_s[m_i] == ']')
            {
                ++m_i;
                return Json{a};
            }
            while (true)
            {
                a.push_back(Value());
                Space();
                char d = m_s[m_i++];
                if (d == ']')
                {
                    return Json{a};
                }
                if (d != ',')
                {
                    Fail("expected ',' or ']'");
                }
            }
        }
        if (c == '"')
        {
            return Json{String()};
        }
        if (Eat("null"))
        {
            return Json{nullptr};
        }
        if (Eat("true"))
        {
            return Json{true};
        }
        if (Eat("false"))
        {
            return Json{false};
        }
        size_t used = 0;
        double x = std::stod(m_s.substr(m_i, 32), &used);
        if (used == 0)
        {
            Fail("expected a value");
        }
        m_i += used;
        return Json{x};
    }
};

// ----------------------------------------------------------------------------- the run

/// ns-3's congestion control for each variant name of xferlab (Linux's names).
static TypeId
VariantTypeId(const std::string& variant)
{
    static const std::map<std::string, std::string> names = {
        {"reno", "ns3::TcpLinuxReno"},
        {"cubic", "ns3::TcpCubic"},
        {"bic", "ns3::TcpBic"},
        {"highspeed", "ns3::TcpHighSpeed"},
        {"htcp", "ns3::TcpHtcp"},
        {"scalable", "ns3::TcpScalable"},
        {"bbr", "ns3::TcpBbr"},
    };
    auto it = names.find(variant);
    if (it == names.end())
    {
        throw std::runtime_error("variant " + variant + " has no ns-3 counterpart here");
    }
    return TypeId::LookupByName(it->second);
}

/// A sender-side sample (xferlab's `tcp` table).
struct TcpSample
{
    double t;
    uint32_t cwndBytes;
    uint32_t ssthreshBytes;
    double srttMs;
    double rtoMs;
    uint32_t inFlightBytes;
    uint64_t retransmissions;
    int caState;
};

/// One TCP connection: what the scenario says about it and what was measured.
struct Flow
{
    uint32_t id;
    uint32_t pair;
    uint32_t stream;
    std::string variant;
    double start;
    double duration; // < 0: volume-bound
    uint64_t volume; // 0: duration-bound
    double end;      // end of its lifetime (duration: start + duration; volume: completion)

    Ptr<BulkSendApplication> app;
    Ptr<Socket> socket;
    double goodputInterval;
    std::vector<uint64_t> bins; // receiver bytes per goodput interval, from t = 0
    uint64_t rxBytes{0};        // delivered within its lifetime
    double completion{-1};

    // Latest sender state, updated by trace sources, sampled every TCP interval.
    uint32_t cwnd{0};
    uint32_t ssthresh{0};
    Time srtt;
    Time rto;
    uint32_t inFlight{0};
    int caState{0};
    uint64_t segmentsSent{0};
    uint64_t retransmissions{0};
    uint64_t fastRecoveries{0};
    uint64_t timeouts{0};
    std::vector<TcpSample> samples;
    /// Every change of congestion state (kind 0, Linux's CA state numbers) and of
    /// ssthresh (kind 1, bytes), as (time, kind, value): the timeline of each loss episode.
    std::vector<std::tuple<double, int, uint32_t>> events;
};

/// Counters of the bottleneck queue (xferlab's `link` table), one row per link interval.
struct LinkRow
{
    double t;
    uint64_t bytes;
    uint64_t packets;
    uint64_t drops;
    uint32_t queue;
    uint32_t queueMax;
};

struct Bottleneck
{
    Ptr<Queue<Packet>> queue;
    double interval{0};
    uint64_t bytes{0};
    uint64_t packets{0};
    uint64_t drops{0};
    uint32_t queueMax{0};
    std::vector<LinkRow> rows;
    std::vector<std::tuple<double, int, uint32_t>> dropLog; // (time, flow id or -1, TCP seq)
    std::map<uint16_t, uint32_t> flowOfPort;     // receiver port → flow id
};

/// The flow a dropped IP packet belongs to (by its receiver port, or -1) and its TCP
/// sequence number (0 if none).
static std::pair<int, uint32_t>
FlowOfPacket(const Bottleneck* b, Ptr<const Packet> p)
{
    Ptr<Packet> copy = p->Copy();
    Ipv4Header ip;
    copy->RemoveHeader(ip);
    TcpHeader tcp;
    if (ip.GetProtocol() != TcpL4Protocol::PROT_NUMBER || copy->PeekHeader(tcp) == 0)
    {
        return {-1, 0};
    }
    auto it = b->flowOfPort.find(tcp.GetDestinationPort());
    int flow = it == b->flowOfPort.end() ? -1 : static_cast<int>(it->second);
    return {flow, tcp.GetSequenceNumber().GetValue()};
}

/// A packet the bottleneck could not queue. With no queue disc, ns-3's traffic-control layer
/// drops it itself once the device has stopped its full queue (flow control), so the
/// drop-tail drops are the router's "TcDrop"s; the queue's own "Drop" would count any other.
static void
OnBottleneckDrop(Bottleneck* b, Ptr<const Packet> p)
{
    ++b->drops;
    auto [flow, seq] = FlowOfPacket(b, p);
    b->dropLog.emplace_back(Simulator::Now().GetSeconds(), flow, seq);
}

/// A packet the queue itself dropped (it carries its PPP header).
static void
OnQueueDrop(Bottleneck* b, Ptr<const Packet> p)
{
    Ptr<Packet> copy = p->Copy();
    PppHeader ppp;
    copy->RemoveHeader(ppp);
    OnBottleneckDrop(b, copy);
}

/// A packet dropped by a sender's own interface queue (ns-3 has no TCP Small Queues).
static void
OnHostDrop(uint64_t* count, Ptr<const Packet>)
{
    ++*count;
}

static void
OnBottleneckEnqueue(Bottleneck* b, Ptr<const Packet>)
{
    b->queueMax = std::max(b->queueMax, b->queue->GetNPackets());
}

static void
OnBottleneckDequeue(Bottleneck* b, Ptr<const Packet> p)
{
    // IP bytes: the PPP header is link framing, as Ethernet's is in xferlab's counters.
    b->bytes += p->GetSize() - 2;
    ++b->packets;
}

/// Closes the link interval that ends now: one row, stamped with the interval's start.
static void
SampleBottleneck(Bottleneck* b)
{
    double t = Simulator::Now().GetSeconds() - b->interval;
    uint32_t q = b->queue->GetNPackets();
    b->rows.push_back({t, b->bytes, b->packets, b->drops, q, std::max(b->queueMax, q)});
    b->bytes = b->packets = b->drops = 0;
    b->queueMax = q;
    Simulator::Schedule(Seconds(b->interval), &SampleBottleneck, b);
}

static void
OnSinkRx(Flow* f, Ptr<const Packet> p, const Address&)
{
    double now = Simulator::Now().GetSeconds();
    if (now > f->end)
    {
        return; // after its lifetime: not the flow's goodput
    }
    size_t k = static_cast<size_t>(std::floor(now / f->goodputInterval));
    if (k >= f->bins.size())
    {
        f->bins.resize(k + 1, 0);
    }
    f->bins[k] += p->GetSize();
    f->rxBytes += p->GetSize();
    if (f->volume > 0 && f->completion < 0 && f->rxBytes >= f->volume)
    {
        f->completion = now - f->start;
        f->end = now;
    }
}

static void
OnCwnd(Flow* f, uint32_t, uint32_t v)
{
    f->cwnd = v;
}

static void
OnSsthresh(Flow* f, uint32_t, uint32_t v)
{
    f->ssthresh = v;
    f->events.emplace_back(Simulator::Now().GetSeconds(), 1, v);
}

static void
OnSrtt(Flow* f, Time, Time v)
{
    f->srtt = v;
}

static void
OnRto(Flow* f, Time, Time v)
{
    f->rto = v;
}

static void
OnInFlight(Flow* f, uint32_t, uint32_t v)
{
    f->inFlight = v;
}

static void
OnCongState(Flow* f, TcpSocketState::TcpCongState_t, TcpSocketState::TcpCongState_t v)
{
    f->caState = static_cast<int>(v);
    f->events.emplace_back(Simulator::Now().GetSeconds(), 0, static_cast<uint32_t>(v));
    if (v == TcpSocketState::CA_RECOVERY)
    {
        ++f->fastRecoveries;
    }
    else if (v == TcpSocketState::CA_LOSS)
    {
        ++f->timeouts;
    }
}

static void
OnTx(Flow* f, Ptr<const Packet> p, const TcpHeader&, Ptr<const TcpSocketBase>)
{
    if (p->GetSize() > 0)
    {
        ++f->segmentsSent;
    }
}

static void
OnRetransmission(Flow* f,
                 Ptr<const Packet>,
                 const TcpHeader&,
                 const Address&,
                 const Address&,
                 Ptr<const TcpSocketBase>)
{
    ++f->retransmissions;
}

static void
SampleTcp(Flow* f, double interval)
{
    double now = Simulator::Now().GetSeconds();
    if (now > f->end)
    {
        return;
    }
    f->samples.push_back({now,
                          f->cwnd,
                          f->ssthresh,
                          f->srtt.GetSeconds() * 1e3,
                          f->rto.GetSeconds() * 1e3,
                          f->inFlight,
                          f->retransmissions,
                          f->caState});
    Simulator::Schedule(Seconds(interval), &SampleTcp, f, interval);
}

/// BulkSend creates its socket when it starts: hook the trace sources then.
static void
HookSocket(Flow* f, double tcpInterval)
{
    f->socket = f->app->GetSocket();
    Ptr<Socket> s = f->socket;
    s->TraceConnectWithoutContext("CongestionWindow", MakeBoundCallback(&OnCwnd, f));
    s->TraceConnectWithoutContext("SlowStartThreshold", MakeBoundCallback(&OnSsthresh, f));
    s->TraceConnectWithoutContext("RTT", MakeBoundCallback(&OnSrtt, f));
    s->TraceConnectWithoutContext("RTO", MakeBoundCallback(&OnRto, f));
    s->TraceConnectWithoutContext("BytesInFlight", MakeBoundCallback(&OnInFlight, f));
    s->TraceConnectWithoutContext("CongState", MakeBoundCallback(&OnCongState, f));
    s->TraceConnectWithoutContext("Tx", MakeBoundCallback(&OnTx, f));
    s->TraceConnectWithoutContext("Retransmission", MakeBoundCallback(&OnRetransmission, f));
    SampleTcp(f, tcpInterval);
}

/// Choices of the model that the scenario does not make.
struct Options
{
    /// Packets a sender's interface queues (Linux's default txqueuelen).
    uint32_t hostQueue{1000};
    /// The propagation delay on the access links rather than after the bottleneck.
    bool delayAtSender{false};
};

/// What the program does not model: refuse rather than run something else.
static void
CheckSupported(const Json& c)
{
    auto refuse = [](const std::string& what) {
        throw std::runtime_error(what + " is not modelled by the ns-3 dumbbell");
    };
    if (!c["shaper"].IsNull())
    {
        refuse("topology.shaper");
    }
    if (c["loss_rate"].NumOr(0) > 0)
    {
        refuse("topology.loss_rate");
    }
    if (c["reverse_sources"].NumOr(0) > 0)
    {
        refuse("workload.reverse");
    }
    if (c["background_sources"].NumOr(0) > 0)
    {
        refuse("workload.background");
    }
    if (!c["window_cap_packets"].IsNull())
    {
        refuse("protocol.window_cap");
    }
    for (const auto& f : c["flows"].Arr())
    {
        if (!f["limiter"].IsNull())
        {
            refuse("protocol.rate_limit");
        }
    }
}

static std::string
Fmt(double x)
{
    char buf[32];
    std::snprintf(buf, sizeof buf, "%.9g", x);
    return buf;
}

static void
WriteResult(std::ostream& o,
            const Json& c,
            const std::vector<std::unique_ptr<Flow>>& flows,
            const Bottleneck& b,
            double simEnd,
            double wall,
            const Options& opt,
            uint64_t hostDrops)
{
    o << "{\"ns3_version\": \"" << NS3_VERSION << "\", \"name\": \"" << c["name"].Str()
      << "\", \"end_s\": " << Fmt(simEnd) << ", \"wall_s\": " << Fmt(wall)
      << ", \"goodput_interval_s\": " << Fmt(c["goodput_interval_s"].Num())
      << ", \"link_interval_s\": " << Fmt(c["link_interval_s"].Num())
      << ", \"host_queue_packets\": " << opt.hostQueue << ", \"delay_at\": \""
      << (opt.delayAtSender ? "sender" : "receiver") << "\", \"host_drops\": " << hostDrops
      << ",\n \"flows\": [";
    for (size_t i = 0; i < flows.size(); ++i)
    {
        const Flow& f = *flows[i];
        o << (i ? ",\n  " : "\n  ") << "{\"flow_id\": " << f.id << ", \"pair\": " << f.pair
          << ", \"stream\": " << f.stream << ", \"variant\": \"" << f.variant
          << "\", \"start\": " << Fmt(f.start) << ", \"end\": " << Fmt(std::min(f.end, simEnd))
          << ", \"bytes\": " << f.rxBytes << ", \"volume_bytes\": "
          << (f.volume ? std::to_string(f.volume) : "null") << ", \"completion_time\": "
          << (f.completion >= 0 ? Fmt(f.completion) : "null")
          << ", \"segments_sent\": " << f.segmentsSent
          << ", \"retransmissions\": " << f.retransmissions
          << ", \"fast_recoveries\": " << f.fastRecoveries << ", \"timeouts\": " << f.timeouts
          << ",\n   \"goodput_bytes\": [";
        for (size_t k = 0; k < f.bins.size(); ++k)
        {
            o << (k ? "," : "") << f.bins[k];
        }
        o << "],\n   \"tcp\": [";
        for (size_t k = 0; k < f.samples.size(); ++k)
        {
            const TcpSample& s = f.samples[k];
            o << (k ? "," : "") << "[" << Fmt(s.t) << "," << s.cwndBytes << ","
              << s.ssthreshBytes << "," << Fmt(s.srttMs) << "," << Fmt(s.rtoMs) << ","
              << s.inFlightBytes << "," << s.retransmissions << "," << s.caState << "]";
        }
        o << "],\n   \"events\": [";
        for (size_t k = 0; k < f.events.size(); ++k)
        {
            const auto& [t, kind, value] = f.events[k];
            o << (k ? "," : "") << "[" << Fmt(t) << "," << kind << "," << value << "]";
        }
        o << "]}";
    }
    o << "],\n \"link\": [";
    for (size_t k = 0; k < b.rows.size(); ++k)
    {
        const LinkRow& r = b.rows[k];
        o << (k ? "," : "") << "[" << Fmt(r.t) << "," << r.bytes << "," << r.packets << ","
          << r.drops << "," << r.queue << "," << r.queueMax << "]";
    }
    o << "],\n \"drops\": [";
    for (size_t k = 0; k < b.dropLog.size(); ++k)
    {
        const auto& [t, flow, seq] = b.dropLog[k];
        o << (k ? "," : "") << "[" << Fmt(t) << "," << flow << "," << seq << "]";
    }
    o << "]}\n";
}

static int
Run(const std::string& configPath, const std::string& outPath, const Options& opt)
{
    std::ifstream in(configPath);
    if (!in)
    {
        throw std::runtime_error(configPath + ": cannot read");
    }
    std::stringstream text;
    text << in.rdbuf();
    const std::string body = text.str();
    const Json c = JsonReader(body).Document();
    CheckSupported(c);

    const uint32_t mss = static_cast<uint32_t>(c["mss"].Num());
    const uint32_t mtu = static_cast<uint32_t>(c["mtu"].Num());
    const double capacity = c["bottleneck_rate_bps"].Num();
    const uint32_t buffer = static_cast<uint32_t>(c["buffer_packets"].Num());
    const double gpInterval = c["goodput_interval_s"].Num();
    const double linkInterval = c["link_interval_s"].Num();
    const double tcpInterval = c["tcp_interval_s"].Num();
    const auto& paths = c["pair_paths"].Arr();
    const uint32_t pairs = static_cast<uint32_t>(c["pairs"].Num());

    // Socket buffers: four times the largest window the path can hold (BDP + B), so that
    // neither the sender's buffer nor the receiver's advertised window ever limits.
    double maxRtt = 0;
    double maxRate = capacity;
    for (uint32_t k = 0; k < pairs; ++k)
    {
        maxRtt = std::max(maxRtt, paths[k]["rtt_s"].Num());
        maxRate = std::max(maxRate, paths[k]["access_rate_bps"].Num());
    }
    double window = maxRate * maxRtt / 8 + static_cast<double>(buffer) * mtu;
    auto sockBuf = static_cast<uint32_t>(std::min(4 * window + (1 << 20), 1e9));

    RngSeedManager::SetSeed(1);
    RngSeedManager::SetRun(static_cast<uint64_t>(c["seed"].NumOr(1)) + 1);

    Config::SetDefault("ns3::TcpSocket::SegmentSize", UintegerValue(mss));
    Config::SetDefault("ns3::TcpSocket::InitialCwnd",
                       UintegerValue(static_cast<uint32_t>(c["initial_cwnd"].Num())));
    Config::SetDefault("ns3::TcpSocket::DelAckCount", UintegerValue(c["delayed_ack"].Bool() ? 2 : 1));
    Config::SetDefault("ns3::TcpSocket::DelAckTimeout", TimeValue(MilliSeconds(40)));
    Config::SetDefault("ns3::TcpSocket::SndBufSize", UintegerValue(sockBuf));
    Config::SetDefault("ns3::TcpSocket::RcvBufSize", UintegerValue(sockBuf));
    Config::SetDefault("ns3::TcpSocketBase::MinRto", TimeValue(Seconds(c["rto_min_s"].Num())));
    Config::SetDefault("ns3::TcpSocketBase::Sack", BooleanValue(true));
    Config::SetDefault("ns3::TcpSocketBase::Timestamp", BooleanValue(true));
    Config::SetDefault("ns3::TcpSocketBase::WindowScaling", BooleanValue(true));

    NodeContainer senders;
    NodeContainer receivers;
    NodeContainer routers;
    senders.Create(pairs);
    receivers.Create(pairs);
    routers.Create(2);
    InternetStackHelper stack;
    stack.Install(senders);
    stack.Install(receivers);
    stack.Install(routers);

    const std::string bigQueue = "1000000p"; // routers' other queues and receivers: never fill
    PointToPointHelper p2p;
    p2p.SetQueue("ns3::DropTailQueue<Packet>", "MaxSize", StringValue(bigQueue));
    p2p.SetDeviceAttribute("Mtu", UintegerValue(mtu));

    Ipv4AddressHelper addresses("10.0.0.0", "255.255.255.252");
    NetDeviceContainer all;
    std::vector<Ipv4Address> receiverAddress(pairs);

    p2p.SetDeviceAttribute("DataRate", DataRateValue(DataRate(static_cast<uint64_t>(capacity))));
    p2p.SetChannelAttribute("Delay", TimeValue(Seconds(0)));
    NetDeviceContainer core = p2p.Install(routers.Get(0), routers.Get(1));
    addresses.Assign(core);
    addresses.NewNetwork();
    all.Add(core);

    for (uint32_t k = 0; k < pairs; ++k)
    {
        p2p.SetDeviceAttribute(
            "DataRate",
            DataRateValue(DataRate(static_cast<uint64_t>(paths[k]["access_rate_bps"].Num()))));
        const Time oneWay = Seconds(paths[k]["rtt_s"].Num() / 2);
        p2p.SetChannelAttribute("Delay", TimeValue(opt.delayAtSender ? oneWay : Seconds(0)));
        NetDeviceContainer access = p2p.Install(senders.Get(k), routers.Get(0));
        DynamicCast<PointToPointNetDevice>(access.Get(0))
            ->GetQueue()
            ->SetMaxSize(QueueSize(QueueSizeUnit::PACKETS, opt.hostQueue));
        addresses.Assign(access);
        addresses.NewNetwork();
        all.Add(access);

        p2p.SetDeviceAttribute("DataRate",
                               DataRateValue(DataRate(static_cast<uint64_t>(100 * capacity))));
        p2p.SetChannelAttribute("Delay", TimeValue(opt.delayAtSender ? Seconds(0) : oneWay));
        NetDeviceContainer exit = p2p.Install(routers.Get(1), receivers.Get(k));
        Ipv4InterfaceContainer ifs = addresses.Assign(exit);
        addresses.NewNetwork();
        receiverAddress[k] = ifs.GetAddress(1);
        all.Add(exit);
    }
    // No queue disc anywhere: packets go straight to the devices' drop-tail queues.
    TrafficControlHelper().Uninstall(all);
    Ipv4GlobalRoutingHelper::PopulateRoutingTables();

    Bottleneck bottleneck;
    bottleneck.queue = DynamicCast<PointToPointNetDevice>(core.Get(0))->GetQueue();
    bottleneck.queue->SetMaxSize(QueueSize(QueueSizeUnit::PACKETS, buffer));
    bottleneck.interval = linkInterval;
    bottleneck.queue->TraceConnectWithoutContext("Drop", MakeBoundCallback(&OnQueueDrop, &bottleneck));
    routers.Get(0)->GetObject<TrafficControlLayer>()->TraceConnectWithoutContext(
        "TcDrop",
        MakeBoundCallback(&OnBottleneckDrop, &bottleneck));
    uint64_t hostDrops = 0;
    for (uint32_t k = 0; k < pairs; ++k)
    {
        senders.Get(k)->GetObject<TrafficControlLayer>()->TraceConnectWithoutContext(
            "TcDrop",
            MakeBoundCallback(&OnHostDrop, &hostDrops));
    }
    bottleneck.queue->TraceConnectWithoutContext("Enqueue",
                                                 MakeBoundCallback(&OnBottleneckEnqueue, &bottleneck));
    bottleneck.queue->TraceConnectWithoutContext("Dequeue",
                                                 MakeBoundCallback(&OnBottleneckDequeue, &bottleneck));

    std::vector<std::unique_ptr<Flow>> flows;
    double simEnd = 0;
    bool volumeRun = false;
    for (const auto& spec : c["flows"].Arr())
    {
        auto f = std::make_unique<Flow>();
        f->id = static_cast<uint32_t>(spec["flow_id"].Num());
        f->pair = static_cast<uint32_t>(spec["pair"].Num());
        f->stream = static_cast<uint32_t>(spec["stream"].Num());
        f->variant = spec["variant"].Str();
        f->start = spec["start_s"].Num();
        f->duration = spec["duration_s"].NumOr(-1);
        f->volume = static_cast<uint64_t>(spec["volume_bytes"].NumOr(0));
        f->goodputInterval = gpInterval;
        if (f->duration >= 0)
        {
            f->end = f->start + f->duration;
            simEnd = std::max(simEnd, f->end);
        }
        else
        {
            volumeRun = true;
            f->end = c["end_s"].Num(); // until it completes, at the latest the run's end
        }

        Ptr<Node> sender = senders.Get(f->pair);
        sender->GetObject<TcpL4Protocol>()->SetAttribute("SocketType",
                                                         TypeIdValue(VariantTypeId(f->variant)));
        const uint16_t port = static_cast<uint16_t>(10000 + f->id);
        bottleneck.flowOfPort[port] = f->id;

        PacketSinkHelper sinkHelper("ns3::TcpSocketFactory",
                                    InetSocketAddress(Ipv4Address::GetAny(), port));
        ApplicationContainer sinkApp = sinkHelper.Install(receivers.Get(f->pair));
        sinkApp.Start(Seconds(0));
        sinkApp.Get(0)->TraceConnectWithoutContext("Rx", MakeBoundCallback(&OnSinkRx, f.get()));

        BulkSendHelper source("ns3::TcpSocketFactory",
                              InetSocketAddress(receiverAddress[f->pair], port));
        source.SetAttribute("MaxBytes", UintegerValue(f->volume));
        source.SetAttribute("SendSize", UintegerValue(64 * 1024));
        ApplicationContainer sourceApp = source.Install(sender);
        sourceApp.Start(Seconds(f->start));
        if (f->duration >= 0)
        {
            sourceApp.Stop(Seconds(f->end));
        }
        f->app = DynamicCast<BulkSendApplication>(sourceApp.Get(0));
        // The socket exists once the application has started: hook it 1 ns later (no
        // segment can have been acknowledged by then).
        Simulator::Schedule(Seconds(f->start) + NanoSeconds(1), &HookSocket, f.get(), tcpInterval);
        flows.push_back(std::move(f));
    }
    if (volumeRun)
    {
        simEnd = c["end_s"].Num();
    }

    Simulator::Schedule(Seconds(linkInterval), &SampleBottleneck, &bottleneck);
    // Volume runs stop when every flow has completed (checked at each link sample).
    std::function<void()> checkDone;
    checkDone = [&]() {
        bool done = true;
        double last = 0;
        for (const auto& f : flows)
        {
            done = done && f->completion >= 0;
            last = std::max(last, f->end);
        }
        if (done)
        {
            simEnd = last;
            Simulator::Stop();
            return;
        }
        Simulator::Schedule(Seconds(linkInterval), checkDone);
    };
    if (volumeRun)
    {
        Simulator::Schedule(Seconds(linkInterval), checkDone);
    }

    auto t0 = std::chrono::steady_clock::now();
    Simulator::Stop(Seconds(simEnd));
    Simulator::Run();
    double wall = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    simEnd = std::min(simEnd, Simulator::Now().GetSeconds());

    std::ofstream out(outPath);
    if (!out)
    {
        throw std::runtime_error(outPath + ": cannot write");
    }
    WriteResult(out, c, flows, bottleneck, simEnd, wall, opt, hostDrops);
    Simulator::Destroy();
    return 0;
}

int
main(int argc, char* argv[])
{
    std::string config;
    std::string out = "result.json";
    Options opt;
    std::string delayAt = "receiver";
    CommandLine cmd(__FILE__);
    cmd.AddValue("config", "resolved scenario (JSON, from xferlab.scenario.resolve)", config);
    cmd.AddValue("out", "result file (JSON)", out);
    cmd.AddValue("host-queue",
                 "packets a sender's interface queues (Linux's default txqueuelen: 1000)",
                 opt.hostQueue);
    cmd.AddValue("delay-at",
                 "where each pair's propagation delay is: 'receiver' (after the bottleneck, as "
                 "xferlab's simulator and netns backend place it) or 'sender' (its access link)",
                 delayAt);
    cmd.Parse(argc, argv);
    if (config.empty())
    {
        std::fprintf(stderr, "dumbbell: --config=FILE is required\n");
        return 2;
    }
    try
    {
        if (delayAt != "receiver" && delayAt != "sender")
        {
            throw std::runtime_error("--delay-at must be 'receiver' or 'sender'");
        }
        opt.delayAtSender = delayAt == "sender";
        return Run(config, out, opt);
    }
    catch (const std::exception& e)
    {
        std::fprintf(stderr, "dumbbell: %s\n", e.what());
        return 2;
    }
}
