module {
  func.func @nncert(%arg0: !torch.vtensor<[1,1,1,1],si8>) -> !torch.vtensor<[1,1,3,1],si8> attributes {torch.onnx_meta.ir_version = 10 : si64, torch.onnx_meta.opset_version = 21 : si64, torch.onnx_meta.producer_name = "nncert", torch.onnx_meta.producer_version = ""} {
    %none = torch.constant.none
    %0 = torch.operator "onnx.Transpose"(%arg0) {torch.onnx.perm = [0 : si64, 3 : si64, 1 : si64, 2 : si64]} : (!torch.vtensor<[1,1,1,1],si8>) -> !torch.vtensor<[1,1,1,1],si8> 
    %1 = torch.operator "onnx.MaxPool"(%0) {torch.onnx.kernel_shape = [2 : si64, 3 : si64], torch.onnx.pads = [0 : si64, 2 : si64, 1 : si64, 2 : si64], torch.onnx.strides = [3 : si64, 1 : si64]} : (!torch.vtensor<[1,1,1,1],si8>) -> !torch.vtensor<[1,1,1,3],si8> 
    %2 = torch.operator "onnx.Transpose"(%1) {torch.onnx.perm = [0 : si64, 2 : si64, 3 : si64, 1 : si64]} : (!torch.vtensor<[1,1,1,3],si8>) -> !torch.vtensor<[1,1,3,1],si8> 
    return %2 : !torch.vtensor<[1,1,3,1],si8>
  }
}
